"""Build OpenYurt's yurt-manager from the module pinned in go.mod, for bench/manager_scale.py.

`make yurt-manager-bin` runs this. The pin is bench/yurthub's: the same
`github.com/openyurtio/openyurt` version and the same `replace` lines (checked here: a build
from another version is refused), in a module of its own because yurt-manager imports more of
OpenYurt than YurtHub does (controller-runtime's manager, the raven and calico APIs), so its
go.sum is larger; `tools.go` names the command and `go mod tidy` wrote go.mod and go.sum.
The binary goes to ~/.cache/edgehub/yurthub-<version>/yurt-manager (or $EDGEHUB_CACHE/...),
beside YurtHub's, never into the repository, and is rebuilt only when go.mod or go.sum change
(a `.pin-yurt-manager` digest beside it).

Standard library only. Prints one line per step; a failed build prints the command and the
compiler's last lines and exits non-zero.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import time
from types import ModuleType

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE = "github.com/openyurtio/openyurt/cmd/yurt-manager"


def _yurthub_build() -> ModuleType:
    """bench/yurthub/build.py (its pin and cache directory are the ones used here)."""
    spec = importlib.util.spec_from_file_location(
        "edgehub_yurthub_build", HERE.parent / "yurthub" / "build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replaces(text: str) -> list[str]:
    found = re.search(r"^replace \((.*?)^\)", text, re.M | re.S)
    return sorted(line.strip() for line in (found.group(1) if found else "").splitlines() if line)


def pinned_version() -> str:
    text = (HERE / "go.mod").read_text()
    found = re.search(r"^require github\.com/openyurtio/openyurt (v\S+)", text, re.M)
    if found is None:
        raise SystemExit("bench/yurtmanager/go.mod: no github.com/openyurtio/openyurt requirement")
    yurthub = _yurthub_build()
    if found.group(1) != yurthub.pinned_version():
        raise SystemExit(
            f"bench/yurtmanager/go.mod pins openyurt {found.group(1)}, bench/yurthub/go.mod "
            f"{yurthub.pinned_version()}: they must be the same pin"
        )
    if _replaces(text) != _replaces((HERE.parent / "yurthub" / "go.mod").read_text()):
        raise SystemExit("bench/yurtmanager/go.mod: its replace lines differ from bench/yurthub's")
    return str(found.group(1))


def binary() -> pathlib.Path:
    version = pinned_version()
    root: pathlib.Path = _yurthub_build().cache_root()
    return root / f"yurthub-{version}" / "yurt-manager"


def module_dir() -> pathlib.Path:
    """The pinned openyurt module's source in the Go module cache (downloaded if missing)."""
    env = dict(os.environ, GOFLAGS="-mod=readonly")
    subprocess.run(["go", "mod", "download", "github.com/openyurtio/openyurt"], cwd=HERE, env=env,
                   check=True, capture_output=True)  # fmt: skip
    found = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "github.com/openyurtio/openyurt"],
        cwd=HERE, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return pathlib.Path(found.stdout.strip())


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def rbac(namespace: str = "kube-system") -> str:
    """yurt-manager's own RBAC as its Helm chart ships it (a ServiceAccount and a ClusterRole
    per controller: it acts with each controller's ServiceAccount token, minted through the
    TokenRequest API), rendered for ``namespace`` (the chart's only template variable). The
    same file's webhook configurations are left out: with them every NodePool write would
    call a webhook nobody serves here."""
    chart = module_dir() / "charts" / "yurt-manager" / "templates"
    text = (chart / "yurt-manager-auto-generated.yaml").read_text()
    rendered = text.replace("{{ .Release.Namespace }}", namespace)
    if "{{" in rendered:
        raise SystemExit("yurt-manager's RBAC template has variables this renderer does not know")
    kept = []
    for doc in re.split(r"^---\s*$", rendered, flags=re.M):
        kind = re.search(r"^kind:\s*(\S+)", doc, re.M)
        if kind is not None and kind.group(1) in RBAC_KINDS:
            kept.append(doc.strip("\n"))
    return "\n---\n".join(kept) + "\n"


def pin_digest() -> str:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum", "tools.go"):
        h.update((HERE / name).read_bytes())
    return h.hexdigest()


def build() -> int:
    target = binary()
    pin = target.parent / ".pin-yurt-manager"
    digest = pin_digest()
    if target.is_file() and pin.is_file() and pin.read_text().strip() == digest:
        print(f"yurt-manager-bin: up to date at {target}", flush=True)
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    pin.unlink(missing_ok=True)
    version = pinned_version()
    tmp = target.parent / ".yurt-manager.tmp"
    # The version it reports is the pinned one, as a release build's.
    ldflags = f"-s -w -X github.com/openyurtio/openyurt/pkg/projectinfo.gitVersion={version}"
    cmd = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), PACKAGE]
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly -buildvcs=false")
    print(f"yurt-manager-bin: building yurt-manager {version} (first build: docs/testbed.md) ...")
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True)
    except FileNotFoundError:
        print("yurt-manager-bin: FAILED: `go` is not on PATH (Go >= 1.25 needed)", file=sys.stderr)
        return 1
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-5:]) or f"exit {proc.returncode}"
        print(f"yurt-manager-bin: FAILED: {' '.join(cmd)}: {tail}", file=sys.stderr)
        return 1
    tmp.replace(target)
    pin.write_text(digest + "\n")
    print(f"yurt-manager-bin: built in {time.monotonic() - started:.0f} s: {target}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--print-path"]:
        print(binary())
        return 0
    return build()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Build the real Kubernetes parts of the test bed from the modules pinned in go.mod.

`make cluster-bins` runs this. The binaries go to ~/.cache/edgehub/k8s-<version>/
(or $EDGEHUB_CACHE/k8s-<version>/), never into the repository. A `.pin` file there
records a digest of go.mod and go.sum: the binaries are rebuilt only when the pin
changes or one is missing. Helm (for the chart tests) is pinned apart in helm/go.mod and
built the same way into ~/.cache/edgehub/helm-<version>/ (`--print-helm` prints its path).
The module's own test programs (``TOOLS``: the client-go informer) are built beside the
binaries, each keyed by the pin and a digest of its sources (`.<name>.pin`): an edit of one
rebuilds only it (`--tools` builds just them).
One progress line per binary; a failed build prints the
binary, the command and the compiler's last lines, and exits non-zero so `make test`
stops instead of skipping the real-cluster suite.

Standard library only: it runs before anything else of the project is importable.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent

# (binary name, package) in build order: the apiserver first, it shares the most
# packages with the others, so the later builds mostly hit Go's build cache.
BINARIES = (
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
    ("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
    ("kubemark", "k8s.io/kubernetes/cmd/kubemark"),
    ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    ("etcd", "go.etcd.io/etcd/server/v3"),
)

# Test programs of this module (binary name, package directory), built into the same directory.
TOOLS = (("informer", "informer"),)


HELM_DIR = HERE / "helm"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"


def helm_version() -> str:
    found = re.search(r"^\s*helm\.sh/helm/v3 (v\S+)", (HELM_DIR / "go.mod").read_text(), re.M)
    if found is None:
        raise SystemExit("tests/cluster/helm/go.mod: no helm.sh/helm/v3 requirement")
    return found.group(1)


def helm_path() -> pathlib.Path:
    return cache_root() / f"helm-{helm_version()}" / "helm"


def pinned_versions(go_mod: str) -> tuple[str, str]:
    """The k8s.io/kubernetes and etcd server versions that go.mod requires."""
    k8s = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", go_mod, re.M)
    etcd = re.search(r"^\s*go\.etcd\.io/etcd/server/v3 (v\S+)", go_mod, re.M)
    if k8s is None or etcd is None:
        raise SystemExit("tests/cluster/go.mod: no k8s.io/kubernetes or etcd server requirement")
    return k8s.group(1), etcd.group(1)


def cache_root() -> pathlib.Path:
    base = os.environ.get("EDGEHUB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edgehub"
    )
    return pathlib.Path(base)


def pin_digest(module: pathlib.Path = HERE) -> str:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        h.update((module / name).read_bytes())
    return h.hexdigest()


def tool_digest(package: str, module: pathlib.Path = HERE) -> str:
    """The pin and the sources of the test program in ``module/package``: what it is built from."""
    h = hashlib.sha256()
    for path in sorted(p for p in (module / package).rglob("*") if p.is_file()):
        h.update(path.relative_to(module).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return pin_digest(module) + "-" + h.hexdigest()[:16]


def ldflags(k8s: str, etcd: str) -> dict[str, str]:
    """-X flags so each binary reports its real version (kubelet registers it on
    its Node, the apiserver serves it at /version, kubectl checks skew)."""
    m = re.match(r"v(\d+)\.(\d+)", k8s)
    assert m is not None
    k8s_vars = {
        "gitVersion": k8s,
        "gitMajor": m.group(1),
        "gitMinor": m.group(2),
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    k8s_flags = " ".join(
        f"-X {pkg}.{k}={v}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for k, v in k8s_vars.items()
    )
    etcd_flags = f"-X go.etcd.io/etcd/api/v3/version.GitSHA=module-{etcd}"
    return {"k8s": f"-s -w {k8s_flags}", "etcd": f"-s -w {etcd_flags}"}


def _go_build(
    name: str, pkg: str, module: pathlib.Path, out: pathlib.Path, flags: str
) -> subprocess.CompletedProcess[str] | None:
    """Build ``pkg`` of ``module`` into ``out/name`` (via a temp file); None: no `go`."""
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly -buildvcs=false")
    tmp = out / f".{name}.tmp"
    cmd = ["go", "build", "-trimpath", "-ldflags", flags, "-o", str(tmp), pkg]
    try:
        proc = subprocess.run(cmd, cwd=module, env=env, capture_output=True, text=True)
    except FileNotFoundError:
        return None
    if proc.returncode == 0:
        tmp.replace(out / name)
    return proc


def build_helm() -> int:
    binary = helm_path()
    out = binary.parent
    version = helm_version()
    # As Helm's own Makefile: the Kubernetes version `helm template`/`lint` assume by default is
    # the client-go it is built with (else v1.20, which charts requiring newer ones refuse).
    found = re.search(
        r"^\s*k8s\.io/client-go v(\d+)\.(\d+)", (HELM_DIR / "go.mod").read_text(), re.M
    )
    minor = found.group(2) if found else "20"
    kube = {"major": "1", "minor": minor}
    flags = f"-s -w -X helm.sh/helm/v3/internal/version.version={version}" + "".join(
        f" -X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part.title()}={kube[part]}"
        for pkg in ("chartutil", "lint/rules")
        for part in ("major", "minor")
    )
    # The flags are part of what is built: a change of them rebuilds too.
    digest = pin_digest(HELM_DIR) + "-" + hashlib.sha256(flags.encode()).hexdigest()[:16]
    pin = out / ".pin"
    if binary.is_file() and pin.is_file() and pin.read_text().strip() == digest:
        print(f"cluster-bins: helm up to date in {out}", flush=True)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    pin.unlink(missing_ok=True)
    print(f"cluster-bins: building helm {version} ...", flush=True)
    t0 = time.monotonic()
    proc = _go_build("helm", HELM_PACKAGE, HELM_DIR, out, flags)
    if proc is None:
        print("cluster-bins: FAILED building helm: `go` is not on PATH", file=sys.stderr)
        return 1
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-5:]) or f"exit {proc.returncode}"
        print(f"cluster-bins: FAILED building helm ({HELM_PACKAGE}): {tail}", file=sys.stderr)
        return 1
    pin.write_text(digest + "\n")
    print(f"cluster-bins: helm done in {time.monotonic() - t0:.0f} s into {out}", flush=True)
    return 0


def build() -> int:
    go_mod = (HERE / "go.mod").read_text()
    k8s, etcd = pinned_versions(go_mod)
    out = cache_root() / f"k8s-{k8s}"
    digest = pin_digest()
    pin = out / ".pin"
    have = all((out / name).is_file() for name, _ in BINARIES)
    if have and pin.is_file() and pin.read_text().strip() == digest:
        print(f"cluster-bins: up to date in {out}", flush=True)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    pin.unlink(missing_ok=True)
    flags = ldflags(k8s, etcd)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly -buildvcs=false")
    started = time.monotonic()
    for i, (name, pkg) in enumerate(BINARIES, 1):
        t0 = time.monotonic()
        version = etcd if name == "etcd" else k8s
        print(f"cluster-bins: [{i}/{len(BINARIES)}] building {name} {version} ...", flush=True)
        tmp = out / f".{name}.tmp"
        cmd = [
            "go",
            "build",
            "-trimpath",
            "-ldflags",
            flags["etcd" if name == "etcd" else "k8s"],
            "-o",
            str(tmp),
            pkg,
        ]
        try:
            proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True)
        except FileNotFoundError:
            print(
                f"cluster-bins: FAILED building {name}: `go` is not on PATH "
                "(the test bed needs Go >= 1.26 and the Go module proxy)",
                file=sys.stderr,
            )
            return 1
        if proc.returncode != 0:
            tail = " | ".join(proc.stderr.strip().splitlines()[-5:]) or f"exit {proc.returncode}"
            print(f"cluster-bins: FAILED building {name} ({pkg}): {tail}", file=sys.stderr)
            return 1
        tmp.replace(out / name)
        print(
            f"cluster-bins: [{i}/{len(BINARIES)}] {name} done in {time.monotonic() - t0:.0f} s",
            flush=True,
        )
    pin.write_text(digest + "\n")
    print(f"cluster-bins: all built in {time.monotonic() - started:.0f} s into {out}", flush=True)
    return 0


def build_tools() -> int:
    k8s, etcd = pinned_versions((HERE / "go.mod").read_text())
    out = cache_root() / f"k8s-{k8s}"
    flags = ldflags(k8s, etcd)["k8s"]
    for name, package in TOOLS:
        digest = tool_digest(package)
        pin = out / f".{name}.pin"
        if (out / name).is_file() and pin.is_file() and pin.read_text().strip() == digest:
            print(f"cluster-bins: {name} up to date in {out}", flush=True)
            continue
        out.mkdir(parents=True, exist_ok=True)
        pin.unlink(missing_ok=True)
        print(f"cluster-bins: building {name} (tests/cluster/{package}) ...", flush=True)
        t0 = time.monotonic()
        proc = _go_build(name, f"./{package}", HERE, out, flags)
        if proc is None:
            print(f"cluster-bins: FAILED building {name}: `go` is not on PATH", file=sys.stderr)
            return 1
        if proc.returncode != 0:
            tail = " | ".join(proc.stderr.strip().splitlines()[-5:]) or f"exit {proc.returncode}"
            print(f"cluster-bins: FAILED building {name} (./{package}): {tail}", file=sys.stderr)
            return 1
        pin.write_text(digest + "\n")
        print(f"cluster-bins: {name} done in {time.monotonic() - t0:.0f} s into {out}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--print-dir"]:
        k8s, _ = pinned_versions((HERE / "go.mod").read_text())
        print(cache_root() / f"k8s-{k8s}")
        return 0
    if argv[1:] == ["--print-helm"]:
        print(helm_path())
        return 0
    if argv[1:] == ["--helm"]:
        return build_helm()
    if argv[1:] == ["--tools"]:
        return build_tools()
    return build() or build_tools() or build_helm()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Build OpenYurt's YurtHub from the module pinned in go.mod, for the side-by-side bench.

`make yurthub-bin` runs this. The binary goes to ~/.cache/edgehub/yurthub-<version>/yurthub
(or $EDGEHUB_CACHE/...), never into the repository, and is rebuilt only when go.mod or go.sum
change (a `.pin` digest beside it, as `tests/cluster/build.py` does for the test bed).

The pin: `github.com/openyurtio/openyurt` at the newest release the Go module proxy serves
(v1.7.0), with the `replace` lines of its own go.mod (a dependent module does not inherit them:
`k8s.io/kubernetes => github.com/kubernetes/kubernetes v1.34.0` and OpenYurt's
apiserver-network-proxy fork). go.sum holds `github.com/kubernetes/kubernetes v1.34.0` as
OpenYurt's own go.sum records it: the checksum database has no entry for that module path
(it is served under its `k8s.io` name), so without the line `go` refuses the download.

Standard library only. Prints one line per step; a failed build prints the command and the
compiler's last lines and exits non-zero.
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
PACKAGE = "github.com/openyurtio/openyurt/cmd/yurthub"


def pinned_version() -> str:
    found = re.search(r"^require github\.com/openyurtio/openyurt (v\S+)", _go_mod(), re.M)
    if found is None:
        raise SystemExit("bench/yurthub/go.mod: no github.com/openyurtio/openyurt requirement")
    return found.group(1)


def _go_mod() -> str:
    return (HERE / "go.mod").read_text()


def cache_root() -> pathlib.Path:
    base = os.environ.get("EDGEHUB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edgehub"
    )
    return pathlib.Path(base)


def binary() -> pathlib.Path:
    return cache_root() / f"yurthub-{pinned_version()}" / "yurthub"


def pin_digest() -> str:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        h.update((HERE / name).read_bytes())
    return h.hexdigest()


def build() -> int:
    target = binary()
    pin = target.parent / ".pin"
    digest = pin_digest()
    if target.is_file() and pin.is_file() and pin.read_text().strip() == digest:
        print(f"yurthub-bin: up to date at {target}", flush=True)
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    pin.unlink(missing_ok=True)
    version = pinned_version()
    tmp = target.parent / ".yurthub.tmp"
    # The version it reports (its User-Agent, /version) is the pinned one, as a release build's.
    ldflags = f"-s -w -X github.com/openyurtio/openyurt/pkg/projectinfo.gitVersion={version}"
    cmd = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), PACKAGE]
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly -buildvcs=false")
    print(f"yurthub-bin: building YurtHub {version} (once per pin: see docs/testbed.md) ...")
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True)
    except FileNotFoundError:
        print("yurthub-bin: FAILED: `go` is not on PATH (Go >= 1.25 needed)", file=sys.stderr)
        return 1
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-5:]) or f"exit {proc.returncode}"
        print(f"yurthub-bin: FAILED: {' '.join(cmd)}: {tail}", file=sys.stderr)
        return 1
    tmp.replace(target)
    pin.write_text(digest + "\n")
    print(f"yurthub-bin: built in {time.monotonic() - started:.0f} s: {target}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--print-path"]:
        print(binary())
        return 0
    return build()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

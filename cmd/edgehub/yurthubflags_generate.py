"""Generate ``yurthubflags.json``: every flag of every YurtHub release read, from the releases' own
Go sources.

Usage (from the repository root; needs Go and the Go module proxy, or a warm module cache)::

    .venv/bin/python cmd/edgehub/yurthubflags_generate.py \\
        --release v1.3.0 --release v1.4.0 ... [--source LABEL=PATH ...] \\
        [--help-text LABEL=FILE] [--unavailable v1.0.0 ...]

    .venv/bin/python cmd/edgehub/yurthubflags_generate.py --refresh-built

Each ``--release`` is fetched with ``go mod download -json github.com/openyurtio/openyurt@V``
(the module cache then holds it); its flags are the pflag registrations of every non-test Go file
of ``cmd/yurthub/app/options`` and ``cmd/yurthub/app``, plus klog's flags (from the klog version
the release's go.mod pins) when ``cmd/yurthub`` adds the global flag sets. ``--source`` adds a
tree (a directory or one file) that the proxy does not serve, under a label of its own;
``--help-text`` adds the flags a built binary's ``--help`` lists (flags libraries register that
no source read here shows, e.g. component-base's ``--log-flush-frequency``). Labels are taken in
the order given: that order is what ``first`` and ``last`` mean.

The committed table was made with ``--release`` v1.3.0, v1.4.0, v1.5.0 and v1.7.0 (the versions
the Go module proxy here serves: v1.0.0, v1.1.0, v1.2.0 and v1.6.0 answer 403 and are listed
under ``unavailable``), ``--help-text v1.7.0=`` the output of ``yurthub --help`` of the binary
``make yurthub-bin`` builds, and two ``--source`` trees older than v1.0 (``v0.x(hubself)``, whose
``--cert-mgr-mode`` and ``--access-server-through-hub`` old manifests still carry, and
``v0.x(pre-v1.0)``). klog's flags are read from klog itself: newer component-base versions
expose only ``--v``/``--vmodule`` of them, so the table over-approximates there (a flag
accepted and warned about that the release would have refused), never the other way.

``--refresh-built`` only rewrites each flag's ``built`` (does ``edgehub hub`` have an option of
that name) from the current command: no Go, no network.

The parser (``registrations``) is PURE: Go source text in, (flag name, pflag type) out. It reads
calls, not a syntax tree: ``<x>.<Method>(args)`` where Method is one of pflag's (or Go flag's)
registration methods, arguments split at top-level commas with strings, runes and brackets
skipped; a name given as an identifier is resolved from the ``const``/``var`` string
declarations of the same sources. Standard library only, apart from ``--refresh-built``, which
imports ``edgehub.hub``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping

MODULE = "github.com/openyurtio/openyurt"
KLOG = "k8s.io/klog/v2"
TABLE = pathlib.Path(__file__).resolve().parent / "yurthubflags.json"

# pflag's registration methods by the type word pflag itself prints in --help ("" for bool).
_TYPES = {
    "String": "string",
    "Bool": "bool",
    "Int": "int",
    "Int8": "int8",
    "Int16": "int16",
    "Int32": "int32",
    "Int64": "int64",
    "Uint": "uint",
    "Uint8": "uint8",
    "Uint16": "uint16",
    "Uint32": "uint32",
    "Uint64": "uint64",
    "Float32": "float32",
    "Float64": "float64",
    "Duration": "duration",
    "StringSlice": "stringSlice",
    "StringArray": "stringArray",
    "StringToString": "stringToString",
    "IntSlice": "intSlice",
    "BoolSlice": "boolSlice",
    "DurationSlice": "durationSlice",
    "IP": "ip",
    "IPSlice": "ipSlice",
    "IPNet": "ipNet",
    "Count": "count",
}
_METHOD = re.compile(
    r"\.(?P<base>" + "|".join(sorted(_TYPES, key=len, reverse=True)) + r"|)"
    r"(?P<var>Var)?(?P<short>P|PF)?\("
)
_STRING_DECL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:string\s*)?=\s*\"([^\"\\]*)\"")
_FLAG_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_DEPRECATED = re.compile(r"\.MarkDeprecated\(\s*\"([^\"]+)\"")


def _arguments(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose ``(`` is just before ``start``."""
    args: list[str] = []
    depth = 0
    current: list[str] = []
    i = start
    while i < len(text):
        c = text[i]
        if c in "\"'`":
            end = i + 1
            while end < len(text) and text[end] != c:
                end += 2 if text[end] == "\\" and c != "`" else 1
            current.append(text[i : end + 1])
            i = end + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append("".join(current).strip())
                return [a for a in args if a]
            depth -= 1
        elif c == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
            i += 1
            continue
        current.append(c)
        i += 1
    return []


def _name(arg: str, constants: Mapping[str, str]) -> str | None:
    if len(arg) >= 2 and arg[0] == arg[-1] == '"':
        value = arg[1:-1]
    else:
        value = constants.get(arg.rsplit(".", 1)[-1], "")
    return value if _FLAG_NAME.fullmatch(value) else None


def registrations(sources: Iterable[str]) -> dict[str, str]:
    """PURE: {flag name: pflag type} of every registration call in ``sources`` (Go texts).
    ``Var``/``VarP`` (a custom ``pflag.Value``) has type ``value``: it takes a value."""
    texts = list(sources)
    constants = {m[1]: m[2] for t in texts for m in _STRING_DECL.finditer(t)}
    found: dict[str, str] = {}
    for text in texts:
        for m in _METHOD.finditer(text):
            base, var = m["base"], bool(m["var"])
            if not base and not var:
                continue  # a bare ".P(" is no registration
            args = _arguments(text, m.end())
            position = 1 if var else 0
            if len(args) <= position + 1:
                continue
            name = _name(args[position], constants)
            if name is None:
                continue
            found.setdefault(name, _TYPES[base] if base else "value")
    return found


def deprecations(sources: Iterable[str]) -> set[str]:
    """PURE: names passed to ``MarkDeprecated``."""
    return {m[1] for text in sources for m in _DEPRECATED.finditer(text)}


_HELP_LINE = re.compile(r"^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)(?: (\w+))?", re.M)


def help_flags(text: str) -> dict[str, str]:
    """PURE: {flag: type} from a pflag ``--help`` text (no type word: a bool)."""
    out: dict[str, str] = {}
    for m in _HELP_LINE.finditer(text):
        kind = {"strings": "stringSlice", "": "bool"}.get(m[2] or "", m[2])
        out.setdefault(m[1], kind if kind in _TYPES.values() else "value")
    return out


def normalized(flags: Mapping[str, str]) -> dict[str, str]:
    """Go flag names as pflag's word-separator normaliser shows them (``log_dir`` → ``log-dir``)."""
    return {name.replace("_", "-"): kind for name, kind in flags.items()}


# --- I/O ---------------------------------------------------------------------------------------


def _download(module: str, version: str) -> pathlib.Path:
    # GONOSUMDB: the checksum database answers 404 for some old OpenYurt tags; the text read
    # here is only parsed, never built.
    env = {"GOFLAGS": "-mod=mod", "GONOSUMDB": "github.com/openyurtio"}
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    info = json.loads(proc.stdout or "{}")
    if "Dir" not in info:
        raise SystemExit(f"{module}@{version}: {info.get('Error') or proc.stderr.strip()}")
    return pathlib.Path(info["Dir"])


def _go_files(path: pathlib.Path) -> list[str]:
    if path.is_file():
        return [path.read_text()]
    return [p.read_text() for p in sorted(path.glob("*.go")) if not p.name.endswith("_test.go")]


def _pinned(go_mod: str, module: str) -> str | None:
    name = re.escape(module)
    replaced = re.search(rf"^\s*{name}\s+=>\s+{name}\s+(\S+)", go_mod, re.M)
    if replaced:
        return replaced.group(1)
    required = re.search(rf"^\s*(?:require\s+)?{name}\s+(v\S+)", go_mod, re.M)
    return required.group(1) if required else None


def release_flags(version: str) -> tuple[dict[str, str], set[str]]:
    root = _download(MODULE, version)
    app = root / "cmd" / "yurthub" / "app"
    texts = _go_files(app / "options") + _go_files(app)
    flags = registrations(texts)
    main = "\n".join(_go_files(root / "cmd" / "yurthub") + _go_files(app))
    if "AddGoFlagSet(flag.CommandLine)" in main or "AddGlobalFlags(" in main:
        klog = _pinned((root / "go.mod").read_text(), KLOG)
        if klog:
            klog_root = _download(KLOG, klog)
            for name, kind in normalized(
                registrations([(klog_root / "klog.go").read_text()])
            ).items():
                flags.setdefault(name, kind)
    return flags, deprecations(texts)


def built_flags() -> set[str]:
    """The long option names of ``edgehub hub`` (the only import of our code)."""
    from edgehub import hub

    context = hub.command.context_settings or {}
    names = {n[2:] for n in context.get("help_option_names", ["--help"]) if n.startswith("--")}
    for param in hub.command.params:
        for opt in (*param.opts, *getattr(param, "secondary_opts", ())):
            if opt.startswith("--") and not opt.startswith("--no-"):
                names.add(opt[2:])
    return names


def table(
    labelled: Iterable[tuple[str, dict[str, str], set[str]]],
    built: set[str],
    unavailable: Iterable[str],
) -> dict[str, object]:
    """PURE: the JSON table from (label, flags, deprecated) in release order."""
    flags: dict[str, dict[str, object]] = {}
    labels: list[str] = []
    for label, found, deprecated in labelled:
        if label not in labels:  # a release's --help-text adds to that release
            labels.append(label)
        for name, kind in sorted(found.items()):
            row = flags.setdefault(name, {"type": kind, "first": label})
            row["type"] = kind  # the newest release's: what a current manifest is written for
            row["last"] = label
            if name in deprecated:
                row["deprecated"] = label
    for name, row in flags.items():
        row["built"] = name in built
    return {
        "generated_by": "cmd/edgehub/yurthubflags_generate.py",
        "read": labels,
        "unavailable": list(unavailable),
        "flags": dict(sorted(flags.items())),
    }


def _iter_labelled(args: argparse.Namespace) -> Iterator[tuple[str, dict[str, str], set[str]]]:
    for spec in args.source:
        label, _, path = spec.partition("=")
        texts = _go_files(pathlib.Path(path))
        yield label, registrations(texts), deprecations(texts)
    for version in args.release:
        flags, deprecated = release_flags(version)
        yield version, flags, deprecated
    for spec in args.help_text:
        label, _, path = spec.partition("=")
        yield label, help_flags(pathlib.Path(path).read_text()), set()


def _write(data: Mapping[str, object]) -> None:
    TABLE.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--release", action="append", default=[], help="vX.Y.Z, oldest first")
    p.add_argument("--source", action="append", default=[], help="LABEL=PATH (read before)")
    p.add_argument("--help-text", action="append", default=[], help="LABEL=FILE (read after)")
    p.add_argument("--unavailable", action="append", default=[], help="releases not served")
    p.add_argument("--refresh-built", action="store_true")
    args = p.parse_args(argv[1:])
    built = built_flags()
    if args.refresh_built:
        data = json.loads(TABLE.read_text())
        for name, row in data["flags"].items():
            row["built"] = name in built
        _write(data)
        return 0
    _write(table(_iter_labelled(args), built, args.unavailable))
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

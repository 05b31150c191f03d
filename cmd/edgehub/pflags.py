"""YurtHub's (Go pflag) flag spellings, translated for click, so an OpenYurt static Pod's
arguments work unchanged.

PURE: an argument list in, an argument list and the names of dropped flags out.

What pflag accepts and click does not:

- booleans with a value: ``--enable-dummy-if=false`` / ``=true`` (any of Go's
  ``strconv.ParseBool`` spellings) become ``--no-enable-dummy-if`` / ``--enable-dummy-if``;
- klog's ``--v=2`` (and ``--v 2``): our ``--v`` option (verbosity, mapped onto log levels);
- flags YurtHub has and this hub does not implement (``--profiling``, ``--gc-frequency``,
  klog's ``--logtostderr``, ...): accepted and dropped, with their value, and the caller warns
  once naming them, so nothing is silently ignored. The list knows which of them take a value,
  so ``--working-mode edge`` drops both words.

Everything else is left to click (``--flag=value`` and ``--flag value`` work as they are), so an
unknown flag is still an error. Nothing after ``--`` is touched.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping


class Kind(enum.Enum):
    BOOL = "bool"
    VALUE = "value"


# Every flag of `yurthub` (cmd/yurthub/app/options) and the klog flags it registers.
YURTHUB_FLAGS: Mapping[str, Kind] = {
    **{
        name: Kind.VALUE
        for name in (
            "bind-address",
            "serve-port",
            "bind-proxy-address",
            "proxy-port",
            "proxy-secure-port",
            "multiplexer-port",
            "namespace",
            "server-addr",
            "hub-cert-organizations",
            "gc-frequency",
            "node-name",
            "node-ip",
            "nodepool-name",
            "lb-mode",
            "heartbeat-failed-retry",
            "heartbeat-healthy-threshold",
            "heartbeat-timeout-seconds",
            "heartbeat-interval-seconds",
            "max-requests-in-flight",
            "join-token",
            "bootstrap-mode",
            "bootstrap-file",
            "root-dir",
            "dummy-if-ip",
            "dummy-if-name",
            "disk-cache-path",
            "disabled-resource-filters",
            "working-mode",
            "kubelet-health-grace-period",
            "min-request-timeout",
            "discovery-token-ca-cert-hash",
            "host-control-plane-address",
            "pool-scope-resources",
            "kubeconfig",
            "v",
            "vmodule",
            "log-dir",
            "log-file",
            "log-file-max-size",
            "stderrthreshold",
            "log-flush-frequency",
        )
    },
    **{
        name: Kind.BOOL
        for name in (
            "profiling",
            "enable-dummy-if",
            "enable-iptables",
            "enable-resource-filter",
            "enable-node-pool",
            "enable-pool-service-topology",
            "discovery-token-unsafe-skip-ca-verification",
            "version",
            "logtostderr",
            "alsologtostderr",
            "add-dir-header",
            "skip-headers",
            "skip-log-headers",
            "one-output",
        )
    },
}

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class PflagError(ValueError):
    """A pflag-style argument that has no meaning (e.g. ``--enable-dummy-if=maybe``)."""


def translate(
    args: Iterable[str],
    *,
    bool_flags: Iterable[str],
    value_flags: Iterable[str],
    plain_flags: Iterable[str] = (),
) -> tuple[list[str], list[str]]:
    """(arguments for click, YurtHub flags dropped).

    ``bool_flags``: our on/off options (``--x/--no-x``) by name without dashes;
    ``value_flags``: our options taking a value; ``plain_flags``: our flags without a ``--no-``
    form (``--version``): ``=true`` sets them, ``=false`` leaves them out.
    """
    bools, values, plain = frozenset(bool_flags), frozenset(value_flags), frozenset(plain_flags)
    out: list[str] = []
    dropped: list[str] = []
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        i += 1
        if arg == "--":
            out.extend(items[i - 1 :])
            break
        if not arg.startswith("--") or len(arg) == 2:
            out.append(arg)
            continue
        name, has_value, value = arg[2:].partition("=")
        if name in bools:
            if not has_value or value in _TRUE:
                out.append(f"--{name}")
            elif value in _FALSE:
                out.append(f"--no-{name}")
            else:
                raise PflagError(f"--{name}={value}: not a boolean (true or false)")
            continue
        if name in plain:
            if not has_value or value in _TRUE:
                out.append(f"--{name}")
            elif value not in _FALSE:
                raise PflagError(f"--{name}={value}: not a boolean (true or false)")
            continue
        if name in values or (name.startswith("no-") and name[3:] in bools):
            out.append(arg)
            continue
        kind = YURTHUB_FLAGS.get(name)
        if kind is None:
            out.append(arg)  # click reports it
            continue
        if name not in dropped:
            dropped.append(name)
        if kind is Kind.VALUE and not has_value and i < len(items):
            i += 1  # its value
    return out, dropped

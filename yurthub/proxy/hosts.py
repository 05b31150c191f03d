"""Which ``Host`` (and absolute-form target) the hub's listeners answer.

PURE: strings in, decisions out.

Why: the proxy authenticates nobody and acts with the node's identity. A web page opened on the
node can have its own DNS name resolve to 127.0.0.1 (DNS rebinding) and then talk to the hub;
the browser still sends the page's name as ``Host``. So, like ``kubectl proxy --accept-hosts``,
a request is answered only when the host it names is:

- absent (HTTP/1.0 without ``Host``), or an IP literal that is loopback or one of the
  configured bind addresses (any IP literal when a listener binds all addresses: a rebinding
  page never names an IP, only its own DNS name);
- ``localhost`` (and ``localhost.``), or a name given with ``--proxy-accept-hosts``.

Anything else is a 403 Status. Both the ``Host`` header and the host of an absolute-form
request target are checked (aiohttp's ``request.host`` is the latter when there is one).
``exposure_warnings`` says what a non-loopback bind exposes, for the start-up log.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from yurthub import memo, settings

LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
_UNSPECIFIED = frozenset({"0.0.0.0", "::", ""})
_MEMO_ENTRIES = 64
_MEMO_KEY_MAX = 300


class AcceptedHosts:
    def __init__(self, bind_addresses: Iterable[str], extra: Iterable[str] = ()) -> None:
        binds = [b.strip().lower().strip("[]") for b in bind_addresses]
        self._any_ip = any(b in _UNSPECIFIED for b in binds)
        self._ips = frozenset(ip for ip in (_ip(b) for b in binds) if ip is not None)
        self._decided: memo.BoundedMemo[str, bool] = memo.BoundedMemo(_MEMO_ENTRIES)
        """Hosts already decided: every request names one, nearly always the same."""
        self._names = LOOPBACK_NAMES | frozenset(
            name.strip().lower() for name in (*extra, *binds) if name.strip() and _ip(name) is None
        )

    def allows(self, host: str) -> bool:
        """``host`` as sent (``name``, ``name:port``, ``[v6]:port``, ``v6``); "" is allowed."""
        if not host:
            return True
        known = self._decided.get(host)
        if known is not None:
            return known
        allowed = self._allows(host)
        if len(host) <= _MEMO_KEY_MAX:
            self._decided.put(host, allowed)
        return allowed

    def _allows(self, host: str) -> bool:
        name = _without_port(host.strip().lower())
        if name is None:
            return False
        ip = _ip(name)
        if ip is None:
            return name in self._names
        return ip.is_loopback or self._any_ip or ip in self._ips


def exposure_warnings(listen: settings.ListenSettings) -> list[str]:
    """What the configured bind addresses expose beyond this node (one line each)."""
    warnings = []
    if not _loopback(listen.bind_proxy_address):
        warnings.append(
            f"the proxy on {listen.bind_proxy_address}:{listen.proxy_port} authenticates nobody:"
            " whoever reaches it there acts with this node's identity (bind it to 127.0.0.1 "
            "unless that network is trusted)"
        )
    if not _loopback(listen.bind_address):
        warnings.append(
            f"the hub server on {listen.bind_address}:{listen.serve_port} answers /metrics and "
            "the probes to whoever reaches it there (it shows what runs on this node)"
        )
    return warnings


def _loopback(host: str) -> bool:
    name = host.strip().lower().strip("[]")
    ip = _ip(name)
    return name in LOOPBACK_NAMES if ip is None else ip.is_loopback


def _without_port(host: str) -> str | None:
    """The host part; None when the port part is malformed."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        rest = host[end + 1 :]
        if rest and not (rest.startswith(":") and _port(rest[1:])):
            return None
        return host[1:end]
    if host.count(":") > 1:
        return host  # a bare IPv6 literal
    name, sep, port = host.partition(":")
    if sep and not _port(port):
        return None
    return name


def _port(text: str) -> bool:
    return text.isdigit() and text.isascii() and int(text) <= 65535


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None

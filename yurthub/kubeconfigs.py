"""Load a kubeconfig file into what the hub needs to talk to apiservers as itself.

Reads the current context (or the only one) and resolves: the cluster's ``server`` and CA
(``certificate-authority-data`` or ``certificate-authority``, or ``insecure-skip-tls-verify``),
the user's client certificate and key (inline ``-data`` or files) and/or token (``token`` or
``tokenFile``). Relative file paths are relative to the kubeconfig's directory, as in kubectl.

Produces two ``ssl.SSLContext``s: ``with_identity`` presents the client certificate; ``bare``
verifies the server the same way but presents none (used for requests that carry their own
Bearer token: a presented client certificate would win the apiserver's authentication).

Blocking file I/O: call at startup (or through an executor). Inline key material must be
written to a file for ``ssl``; it goes to a 0600 temporary file that is removed at once.
Never log the token or key; errors name the file and the field, not the value.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import pathlib
import ssl
import tempfile
from typing import Any

import yaml


class KubeconfigError(ValueError):
    """The kubeconfig is missing, unreadable or incomplete (message names file and field)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    """The hub's identity towards apiservers."""

    server: str
    """The kubeconfig's server URL (informational: backends come from ``--server-addr``)."""
    with_identity: ssl.SSLContext
    """TLS context presenting the client certificate (if any)."""
    bare: ssl.SSLContext
    """TLS context verifying the server only."""
    token: str = ""
    """Bearer token of the hub, "" when it authenticates by certificate."""
    has_client_cert: bool = False

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def __repr__(self) -> str:  # never show the token
        token = "***" if self.token else ""
        return f"Identity(server={self.server!r}, cert={self.has_client_cert}, token={token!r})"


def anonymous() -> Identity:
    """No kubeconfig: system CAs, no client identity."""
    ctx = ssl.create_default_context()
    return Identity(server="", with_identity=ctx, bare=ctx)


def load(path: pathlib.Path) -> Identity:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise KubeconfigError(f"kubeconfig {path}: cannot read: {e.strerror}") from e
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise KubeconfigError(f"kubeconfig {path}: not YAML: {e}") from e
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig mapping")
    base = path.parent
    context = _current_context(doc, path)
    cluster = _named(doc, "clusters", "cluster", str(context.get("cluster", "")), path)
    user = _named(doc, "users", "user", str(context.get("user", "")), path)

    server = str(cluster.get("server", ""))
    if not server:
        raise KubeconfigError(f"kubeconfig {path}: cluster has no server")

    bare = _server_context(cluster, base, path)
    with_identity = _server_context(cluster, base, path)
    cert = _material(user, "client-certificate", base, path)
    key = _material(user, "client-key", base, path)
    if (cert is None) != (key is None):
        raise KubeconfigError(f"kubeconfig {path}: client certificate and key must both be set")
    if cert is not None and key is not None:
        _load_cert_chain(with_identity, cert, key, path)

    token = str(user.get("token", "") or "")
    token_file = user.get("tokenFile") or user.get("token-file")
    if not token and token_file:
        token_path = _resolve(str(token_file), base)
        try:
            token = token_path.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise KubeconfigError(f"kubeconfig {path}: tokenFile {token_path}: {e.strerror}") from e
    return Identity(
        server=server,
        with_identity=with_identity,
        bare=bare,
        token=token,
        has_client_cert=cert is not None,
    )


def _current_context(doc: dict[str, Any], path: pathlib.Path) -> dict[str, Any]:
    contexts = doc.get("contexts") or []
    name = doc.get("current-context") or ""
    if not name and len(contexts) == 1:
        name = contexts[0].get("name", "")
    if not name:
        raise KubeconfigError(f"kubeconfig {path}: no current-context")
    return _named(doc, "contexts", "context", str(name), path)


def _named(
    doc: dict[str, Any], section: str, field: str, name: str, path: pathlib.Path
) -> dict[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(field) or {}
            if not isinstance(value, dict):
                raise KubeconfigError(f"kubeconfig {path}: {section} {name!r} is malformed")
            return value
    raise KubeconfigError(f"kubeconfig {path}: {field} {name!r} not found in {section}")


def _resolve(name: str, base: pathlib.Path) -> pathlib.Path:
    p = pathlib.Path(name).expanduser()
    return p if p.is_absolute() else base / p


def _material(
    section: dict[str, Any], field: str, base: pathlib.Path, path: pathlib.Path
) -> bytes | None:
    data = section.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError) as e:
            raise KubeconfigError(f"kubeconfig {path}: {field}-data is not base64") from e
    name = section.get(field)
    if name:
        file = _resolve(str(name), base)
        try:
            return file.read_bytes()
        except OSError as e:
            raise KubeconfigError(f"kubeconfig {path}: {field} {file}: {e.strerror}") from e
    return None


def _server_context(
    cluster: dict[str, Any], base: pathlib.Path, path: pathlib.Path
) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ca = _material(cluster, "certificate-authority", base, path)
    if ca is not None:
        try:
            ctx.load_verify_locations(cadata=ca.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as e:
            raise KubeconfigError(f"kubeconfig {path}: certificate-authority is not PEM") from e
    return ctx


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes, path: pathlib.Path) -> None:
    # ssl only loads key material from files: a private temp dir, removed before returning.
    with tempfile.TemporaryDirectory(prefix="edgehub-kc-") as tmp:
        cert_file = os.path.join(tmp, "cert.pem")
        key_file = os.path.join(tmp, "key.pem")
        for file, data in ((cert_file, cert), (key_file, key)):
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            ctx.load_cert_chain(cert_file, key_file)
        except ssl.SSLError as e:
            raise KubeconfigError(
                f"kubeconfig {path}: client certificate/key do not load: {e.reason}"
            ) from e

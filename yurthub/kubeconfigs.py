"""Load a kubeconfig file into what the hub needs to talk to apiservers as itself.

Reads the current context (or the only one) and resolves: the cluster's ``server`` and CA
(``certificate-authority-data`` or ``certificate-authority``, or ``insecure-skip-tls-verify``),
the user's client certificate and key (inline ``-data`` or files) and/or token (``token`` or
``tokenFile``). Relative file paths are relative to the kubeconfig's directory, as in kubectl.

Produces two ``ssl.SSLContext``s: ``with_identity`` presents the client certificate; ``bare``
verifies the server the same way but presents none (used for requests that carry their own
Bearer token: a presented client certificate would win the apiserver's authentication).

Trust (THREAT_MODEL.md): the kubeconfig's CA is the only trust root, never the system store
beside it. A kubeconfig without a CA (which would mean trusting every public CA for the
apiserver's name) or with ``insecure-skip-tls-verify`` (any server at all) is refused unless
the operator accepted that risk (``TrustPolicy``, the ``--allow-system-trust-store`` and
``--allow-insecure-skip-tls-verify`` flags); accepted, it is logged as a warning whenever it is
loaded (``trust_warning``). The policy applies to every reload too: a rotated kubeconfig that
drops its CA does not replace a verifying identity.

Rotation: an ``Identity`` remembers every file it was read from as a ``FileId`` (resolved path,
device, inode, mtime, size, taken from the open file). ``changed(identity.files)`` is the cheap
test ``proxy/upstream.py`` runs every few seconds: kubelet rotating
``kubelet-client-current.pem`` swaps a symlink (the resolved path changes), a rewritten token
file changes inode or mtime. Blind spot: a same-size rewrite in place within one filesystem
timestamp tick; kubelet and Secret/ConfigMap volumes replace files, never rewrite them.
``load`` is strict so that a half-written or mismatched file fails instead of replacing a
working identity: PEM that does not parse, a key that does not match its certificate, an empty
token file are all ``KubeconfigError``. ``carry_over`` keeps the old
``SSLContext`` objects when their material did not change, so pooled connections that need no
new credentials survive a token rotation.

Blocking file I/O: call at startup (or through an executor). Key material must be in a file for
``ssl``: it goes to a 0600 temporary file that is removed at once, always encrypted
(``privatekeys.ssl_pem``): a key encrypted on disk (the hub's own, sealed: ``key_passwords``
holds what opens it) as it is, a plaintext one (inline ``client-key-data``, kubelet's files)
under a one-time password, so no plaintext key is ever written. Never log the token or key;
errors name the file and the field, not the value.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import enum
import hashlib
import os
import pathlib
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from inputbounds import nesting
from yurthub import privatekeys

# A kubeconfig, certificate, key or token file is a few KiB; anything this big is not one.
MAX_FILE_BYTES = 1 << 20
EXPIRY_WARNING = datetime.timedelta(hours=24)


class KubeconfigError(ValueError):
    """The kubeconfig is missing, unreadable or incomplete (message names file and field)."""


class Trust(enum.Enum):
    """How the apiserver's certificate is checked."""

    KUBECONFIG_CA = "kubeconfig-ca"
    SYSTEM = "system"
    """No CA given: the system trust store (allowed only by ``TrustPolicy.allow_system_store``)."""
    INSECURE = "insecure"
    """``insecure-skip-tls-verify``: not checked at all (``TrustPolicy.allow_insecure``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TrustPolicy:
    """What the operator allowed beyond the kubeconfig's own CA."""

    allow_insecure: bool = False
    """``--allow-insecure-skip-tls-verify``."""
    allow_system_store: bool = False
    """``--allow-system-trust-store``."""


def trust_warning(trust: Trust, where: str) -> str:
    """The warning an accepted weaker trust is logged with ("" for the kubeconfig's CA)."""
    if trust is Trust.INSECURE:
        return (
            f"{where} sets insecure-skip-tls-verify (allowed by --allow-insecure-skip-tls-verify):"
            " the hub accepts ANY server as the apiserver, and anyone on the path can read and"
            " change the node's traffic and its cache"
        )
    if trust is Trust.SYSTEM:
        return (
            f"{where} names no certificate-authority (allowed by --allow-system-trust-store): the"
            " apiserver is trusted by the system trust store, so any public CA can vouch for it"
        )
    return ""


@dataclasses.dataclass(frozen=True, slots=True)
class FileId:
    """A file as it was when read; any field differing later means "read it again"."""

    path: pathlib.Path
    """As the kubeconfig names it (relative names resolved against its directory)."""
    target: str
    """``realpath`` of ``path``: changes when a symlink (kubelet's ``*-current.pem``) is swapped."""
    device: int
    inode: int
    mtime_ns: int
    size: int


def file_id(path: pathlib.Path) -> FileId | None:
    """``path`` as it is now; ``None`` when it cannot be stat'ed (missing, no permission)."""
    try:
        target = os.path.realpath(path)
        st = os.stat(path)
    except OSError:
        return None
    return FileId(path, target, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def changed(files: Iterable[FileId]) -> bool:
    """Whether any of ``files`` differs from the moment it was read (blocking: a few stats)."""
    return any(file_id(f.path) != f for f in files)


class Expiry(enum.Enum):
    VALID = "valid"
    EXPIRING = "expiring"
    """Expires within ``EXPIRY_WARNING``."""
    EXPIRED = "expired"


def expiry(
    not_after: datetime.datetime | None,
    now: datetime.datetime,
    warn_within: datetime.timedelta = EXPIRY_WARNING,
) -> Expiry:
    """Where a client certificate valid until ``not_after`` stands at ``now`` (pure)."""
    if not_after is None or not_after - now > warn_within:
        return Expiry.VALID
    return Expiry.EXPIRED if not_after <= now else Expiry.EXPIRING


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
    files: tuple[FileId, ...] = ()
    """Every file this identity was read from (the kubeconfig first)."""
    subject: str = ""
    """The client certificate's common name (the user the apiserver sees), "" without one."""
    not_after: datetime.datetime | None = None
    """When the client certificate expires (UTC); ``None`` without one."""
    trust_digest: bytes = b""
    """Digest of how the server is verified (CA material, insecure flag): equal digests mean
    ``bare`` can be reused as is."""
    trust: Trust = Trust.KUBECONFIG_CA
    cert_digest: bytes = b""
    """Digest of the client certificate and key: equal (with ``trust_digest``) means
    ``with_identity`` can be reused as is."""
    ca_pem: bytes = b""
    """The cluster CA the kubeconfig names (PEM), b"" when it trusts the system store or skips
    verification."""
    with_identity_h2: ssl.SSLContext | None = None
    """``with_identity``'s twin offering HTTP/2 by ALPN (a context's ALPN list is its own, and
    the HTTP/1.1 client must never be offered h2); None: this identity speaks HTTP/1.1 only."""
    bare_h2: ssl.SSLContext | None = None
    """``bare``'s twin offering HTTP/2."""

    def h2_twin(self, context: ssl.SSLContext) -> ssl.SSLContext | None:
        """The HTTP/2 twin of ``context`` (``with_identity`` or ``bare``), None without one."""
        if context is self.with_identity:
            return self.with_identity_h2
        if context is self.bare:
            return self.bare_h2
        return None

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def describe(self) -> str:
        """For log lines: who the apiserver will see (never the token or key)."""
        parts = []
        if self.has_client_cert:
            until = self.not_after.isoformat() if self.not_after else "?"
            parts.append(f"client certificate CN={self.subject!r} valid until {until}")
        if self.token:
            parts.append("bearer token")
        return ", ".join(parts) or "anonymous"

    def __repr__(self) -> str:  # never show the token
        token = "***" if self.token else ""
        return f"Identity(server={self.server!r}, cert={self.has_client_cert}, token={token!r})"


def carry_over(old: Identity, new: Identity) -> Identity:
    """``new``, reusing ``old``'s TLS contexts where their material is unchanged.

    Connections are pooled per context object, so a token rotation (same certificate, same CA)
    keeps every pooled connection, and a certificate rotation keeps the Bearer-token ones.
    """
    if not old.trust_digest or new.trust_digest != old.trust_digest:
        return new
    bare, bare_h2 = old.bare, old.bare_h2
    with_identity, with_identity_h2 = new.with_identity, new.with_identity_h2
    if new.cert_digest == old.cert_digest:
        with_identity, with_identity_h2 = old.with_identity, old.with_identity_h2
    return dataclasses.replace(
        new,
        bare=bare,
        with_identity=with_identity,
        bare_h2=bare_h2,
        with_identity_h2=with_identity_h2,
    )


def anonymous(servers: Iterable[str] = (), policy: TrustPolicy | None = None) -> Identity:
    """No kubeconfig: no client identity, and over https the system trust store, which
    ``policy`` must allow (else ``KubeconfigError``)."""
    if any(s.startswith("https://") for s in servers) and not (
        policy is not None and policy.allow_system_store
    ):
        raise KubeconfigError(
            "no --kubeconfig: the hub would trust any public CA for the apiserver; give a "
            "kubeconfig with the cluster's CA, or pass --allow-system-trust-store"
        )
    ctx = ssl.create_default_context()
    twin = _h2(ssl.create_default_context())
    return Identity(
        server="",
        with_identity=ctx,
        bare=ctx,
        trust=Trust.SYSTEM,
        with_identity_h2=twin,
        bare_h2=twin,
    )


class _Reader:
    """Reads files whole (bounded) and remembers each one's ``FileId`` from the open file."""

    def __init__(self) -> None:
        self.files: list[FileId] = []

    def read(self, path: pathlib.Path) -> bytes:
        """Raises ``OSError`` (``ValueError`` when larger than ``MAX_FILE_BYTES``)."""
        target = os.path.realpath(path)
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
        self.files.append(FileId(path, target, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
        return data


def load(
    path: pathlib.Path,
    policy: TrustPolicy | None = None,
    key_passwords: Sequence[bytes] = (),
) -> Identity:
    """The identity in the kubeconfig at ``path``; raises ``KubeconfigError``, also for a trust
    ``policy`` does not allow (default: only the kubeconfig's own CA). ``key_passwords``: what
    may open an encrypted client key (the hub's sealed one, ``certs.sealedkeys``)."""
    policy = policy or TrustPolicy()
    reader = _Reader()
    try:
        text = reader.read(path).decode("utf-8")
    except OSError as e:
        raise KubeconfigError(f"kubeconfig {path}: cannot read: {e.strerror}") from e
    except ValueError as e:  # too big, or not UTF-8
        raise KubeconfigError(f"kubeconfig {path}: cannot read: {e}") from e
    try:
        doc = nesting.load_yaml(text)
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

    trust = _trust(cluster, base, path, reader)
    if trust[0] and not policy.allow_insecure:
        raise KubeconfigError(
            f"kubeconfig {path}: insecure-skip-tls-verify would accept any server as the "
            "apiserver; give the cluster's certificate-authority, or pass "
            "--allow-insecure-skip-tls-verify to accept that risk"
        )
    if not trust[0] and trust[1] is None and not policy.allow_system_store:
        raise KubeconfigError(
            f"kubeconfig {path}: the cluster names no certificate-authority, so any public CA "
            "could vouch for the apiserver; add the cluster's CA, or pass "
            "--allow-system-trust-store to accept that risk"
        )
    bare = _server_context(trust, path)
    with_identity = _server_context(trust, path)
    bare_h2 = _h2(_server_context(trust, path))
    with_identity_h2 = _h2(_server_context(trust, path))
    cert = _material(user, "client-certificate", base, path, reader)
    key = _material(user, "client-key", base, path, reader)
    if (cert is None) != (key is None):
        raise KubeconfigError(f"kubeconfig {path}: client certificate and key must both be set")
    subject, not_after, cert_digest = "", None, b""
    if cert is not None and key is not None:
        subject, not_after = _leaf(cert, path)
        _load_cert_chain(with_identity, cert, key, path, key_passwords)
        _load_cert_chain(with_identity_h2, cert, key, path, key_passwords)
        cert_digest = _digest(cert, key)

    token = str(user.get("token", "") or "")
    token_file = user.get("tokenFile") or user.get("token-file")
    if not token and token_file:
        token_path = _resolve(str(token_file), base)
        try:
            token = reader.read(token_path).decode("utf-8").strip()
        except OSError as e:
            raise KubeconfigError(f"kubeconfig {path}: tokenFile {token_path}: {e.strerror}") from e
        except ValueError as e:
            raise KubeconfigError(f"kubeconfig {path}: tokenFile {token_path}: {e}") from e
        if not token:
            # Half-written, or truncated by a failed rotation: never fall back to anonymous.
            raise KubeconfigError(f"kubeconfig {path}: tokenFile {token_path} is empty")
    return Identity(
        server=server,
        with_identity=with_identity,
        bare=bare,
        token=token,
        has_client_cert=cert is not None,
        files=tuple(reader.files),
        subject=subject,
        not_after=not_after,
        trust_digest=_digest(b"insecure" if trust[0] else b"verify", trust[1] or b""),
        cert_digest=cert_digest,
        trust=Trust.INSECURE
        if trust[0]
        else Trust.SYSTEM
        if trust[1] is None
        else Trust.KUBECONFIG_CA,
        ca_pem=trust[1] or b"",
        with_identity_h2=with_identity_h2,
        bare_h2=bare_h2,
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
    section: dict[str, Any], field: str, base: pathlib.Path, path: pathlib.Path, reader: _Reader
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
            return reader.read(file)
        except OSError as e:
            raise KubeconfigError(f"kubeconfig {path}: {field} {file}: {e.strerror}") from e
        except ValueError as e:
            raise KubeconfigError(f"kubeconfig {path}: {field} {file}: {e}") from e
    return None


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def _trust(
    cluster: dict[str, Any], base: pathlib.Path, path: pathlib.Path, reader: _Reader
) -> tuple[bool, bytes | None]:
    """(insecure-skip-tls-verify, CA material or None for the system CAs)."""
    if cluster.get("insecure-skip-tls-verify"):
        return True, None
    return False, _material(cluster, "certificate-authority", base, path, reader)


def _leaf(cert: bytes, path: pathlib.Path) -> tuple[str, datetime.datetime]:
    """(common name, not-after) of the first certificate; a truncated PEM fails here."""
    try:
        chain = x509.load_pem_x509_certificates(cert)
    except ValueError as e:
        raise KubeconfigError(f"kubeconfig {path}: client-certificate is not PEM: {e}") from e
    leaf = chain[0]
    names = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    common_name = names[0].value if names else ""
    cn = common_name.decode("utf-8", "replace") if isinstance(common_name, bytes) else common_name
    return cn, leaf.not_valid_after_utc


def _server_context(trust: tuple[bool, bytes | None], path: pathlib.Path) -> ssl.SSLContext:
    insecure, ca = trust
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if ca is None:
        return ssl.create_default_context()
    # The kubeconfig's CA is the only trust root, as in kubectl/client-go: the system store
    # would also accept any public CA's certificate for the apiserver's name (and loading it
    # is most of what a reload costs).
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cadata=ca.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError) as e:
        raise KubeconfigError(f"kubeconfig {path}: certificate-authority is not PEM") from e
    return ctx


ALPN_H2 = ("h2", "http/1.1")
"""What an HTTP/2 twin offers: h2 first; a server that picks http/1.1 is spoken to by the
HTTP/1.1 client instead (``proxy.h2upstream``)."""


def _h2(ctx: ssl.SSLContext) -> ssl.SSLContext:
    ctx.set_alpn_protocols(list(ALPN_H2))
    return ctx


def _load_cert_chain(
    ctx: ssl.SSLContext,
    cert: bytes,
    key: bytes,
    path: pathlib.Path,
    passwords: Sequence[bytes],
) -> None:
    block = privatekeys.key_block(key)
    if block is None:
        raise KubeconfigError(
            f"kubeconfig {path}: client certificate/key do not load: no complete private key"
        )
    try:
        key_file_pem, password = privatekeys.ssl_pem(block, passwords)
    except privatekeys.Locked as e:
        raise KubeconfigError(
            f"kubeconfig {path}: client certificate/key do not load: the key is sealed and does"
            " not open with this node's data key"
        ) from e
    except privatekeys.BadKey as e:
        raise KubeconfigError(f"kubeconfig {path}: client certificate/key do not load: {e}") from e
    # ssl only loads key material from files: a private temp dir, removed before returning;
    # the key in it is encrypted.
    with tempfile.TemporaryDirectory(prefix="edgehub-kc-") as tmp:
        cert_file = os.path.join(tmp, "cert.pem")
        key_file = os.path.join(tmp, "key.pem")
        for file, data in ((cert_file, cert), (key_file, key_file_pem)):
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        try:
            ctx.load_cert_chain(cert_file, key_file, password=password)
        except ssl.SSLError as e:
            raise KubeconfigError(
                f"kubeconfig {path}: client certificate/key do not load: {e.reason}"
            ) from e

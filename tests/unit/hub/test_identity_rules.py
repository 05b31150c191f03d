"""Table tests for the identity-rotation decisions: certificate expiry, what counts as refused
credentials, and which TLS contexts (hence pooled connections) a reload keeps."""

from __future__ import annotations

import datetime
import pathlib
import ssl

import aiohttp
import pytest

from yurthub import kubeconfigs
from yurthub.proxy import upstream
from yurthub.testing.sim import kubeconfigs as simkubeconfigs
from yurthub.testing.sim import pki

NOW = datetime.datetime(2030, 1, 1, 12, 0, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)


@pytest.mark.parametrize(
    ("not_after", "expected"),
    [
        (None, kubeconfigs.Expiry.VALID),  # no client certificate
        (NOW + 30 * 24 * HOUR, kubeconfigs.Expiry.VALID),
        (NOW + 24 * HOUR + datetime.timedelta(seconds=1), kubeconfigs.Expiry.VALID),
        (NOW + 24 * HOUR, kubeconfigs.Expiry.EXPIRING),
        (NOW + HOUR, kubeconfigs.Expiry.EXPIRING),
        (NOW + datetime.timedelta(seconds=1), kubeconfigs.Expiry.EXPIRING),
        (NOW, kubeconfigs.Expiry.EXPIRED),
        (NOW - HOUR, kubeconfigs.Expiry.EXPIRED),
    ],
)
def test_expiry(not_after: datetime.datetime | None, expected: kubeconfigs.Expiry) -> None:
    assert kubeconfigs.expiry(not_after, NOW) is expected


def test_expiry_window_is_configurable() -> None:
    assert kubeconfigs.expiry(NOW + 2 * HOUR, NOW, HOUR) is kubeconfigs.Expiry.VALID
    assert kubeconfigs.expiry(NOW + HOUR, NOW, 2 * HOUR) is kubeconfigs.Expiry.EXPIRING


def _chained(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ssl.SSLError(1, "tlsv13 alert certificate required"), True),
        (ssl.SSLCertVerificationError(1, "certificate verify failed"), True),
        (aiohttp.ServerDisconnectedError(), True),  # TLS 1.3: a refused client certificate
        (_chained(aiohttp.ClientOSError(104, "reset"), ssl.SSLError(1, "bad certificate")), True),
        (_chained(RuntimeError("wrapped"), aiohttp.ServerDisconnectedError()), True),
        (aiohttp.ClientOSError(111, "connection refused"), False),
        (TimeoutError(), False),
        (ValueError("bad json"), False),
    ],
)
def test_tls_failure(error: BaseException, expected: bool) -> None:
    assert upstream.is_tls_failure(error) is expected


def test_tls_failure_survives_a_cause_cycle() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert not upstream.is_tls_failure(a)


def _identity(trust: bytes, cert: bytes, token: str = "") -> kubeconfigs.Identity:
    return kubeconfigs.Identity(
        server="https://127.0.0.1:6443",
        with_identity=ssl.create_default_context(),
        bare=ssl.create_default_context(),
        token=token,
        trust_digest=trust,
        cert_digest=cert,
        with_identity_h2=ssl.create_default_context(),
        bare_h2=ssl.create_default_context(),
    )


@pytest.mark.parametrize(
    ("old", "new", "keeps_bare", "keeps_own"),
    [
        # Token rotated: same CA, same (no) certificate -> every pooled connection survives.
        (_identity(b"ca1", b"", "t1"), _identity(b"ca1", b"", "t2"), True, True),
        # Certificate rotated: the Bearer-token (bare) pool survives, the hub's own does not.
        (_identity(b"ca1", b"c1"), _identity(b"ca1", b"c2"), True, False),
        # CA rotated: nothing is reused.
        (_identity(b"ca1", b"c1"), _identity(b"ca2", b"c1"), False, False),
        # An identity built without digests (kubeconfigs.anonymous, a test's own) is never reused.
        (_identity(b"", b""), _identity(b"", b""), False, False),
    ],
)
def test_carry_over(
    old: kubeconfigs.Identity, new: kubeconfigs.Identity, keeps_bare: bool, keeps_own: bool
) -> None:
    merged = kubeconfigs.carry_over(old, new)
    assert (merged.bare is old.bare) is keeps_bare
    assert (merged.with_identity is old.with_identity) is keeps_own
    assert merged.token == new.token and merged.cert_digest == new.cert_digest
    # The HTTP/2 twins go with their contexts (their connections are pooled by them too).
    assert (merged.bare_h2 is old.bare_h2) is keeps_bare
    assert (merged.with_identity_h2 is old.with_identity_h2) is keeps_own
    assert merged.h2_twin(merged.bare) is merged.bare_h2
    assert merged.h2_twin(merged.with_identity) is merged.with_identity_h2
    assert merged.h2_twin(ssl.create_default_context()) is None


def test_a_loaded_identity_has_http2_twins_of_its_own(
    tmp_path: pathlib.Path,
) -> None:
    authority = pki.Authority.create()
    cert, key = authority.issue_client("system:node:n1", ["system:nodes"])
    path = simkubeconfigs.write(
        tmp_path / "kubeconfig",
        simkubeconfigs.render(
            server="https://127.0.0.1:6443",
            ca_pem=authority.cert_pem,
            user="system:node:n1",
            cert_pem=cert,
            key_pem=key,
        ),
    )
    identity = kubeconfigs.load(path)
    assert identity.with_identity_h2 is not None and identity.bare_h2 is not None
    # Four contexts: an ALPN list belongs to its context, and HTTP/1.1's must never offer h2.
    contexts = (identity.with_identity, identity.bare, identity.with_identity_h2, identity.bare_h2)
    assert len({id(c) for c in contexts}) == 4

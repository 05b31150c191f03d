"""``kubeconfigs.load`` on real files: what it remembers for rotation and what it refuses.

A rotation must be noticed from ``FileId``s alone (cheap stats), and a new file that is not
complete must fail ``load`` (so the hub keeps its working identity) instead of loading half.
"""

from __future__ import annotations

import datetime
import os
import pathlib
from collections.abc import Callable

import pytest
import yaml

from yurthub import kubeconfigs
from yurthub.testing.sim import pki

AUTHORITY = pki.Authority.create("test-ca")
"""Signs the client certificates (the files under test are only loaded, never verified)."""


def _other_certificate() -> bytes:
    return AUTHORITY.issue_client("system:node:b")[0]


@pytest.fixture
def layout(tmp_path: pathlib.Path) -> pathlib.Path:
    """kubelet's layout: ``pki/kubelet-client-current.pem`` -> a cert+key file; a CA file."""
    directory = tmp_path / "pki"
    directory.mkdir()
    cert, key = AUTHORITY.issue_client("system:node:a")
    (directory / "kubelet-client-1.pem").write_bytes(cert + key)
    (directory / "kubelet-client-current.pem").symlink_to("kubelet-client-1.pem")
    (tmp_path / "ca.crt").write_bytes(AUTHORITY.cert_pem)
    current = "pki/kubelet-client-current.pem"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": "https://127.0.0.1:1", "certificate-authority": "ca.crt"},
            }
        ],
        "users": [{"name": "u", "user": {"client-certificate": current, "client-key": current}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "kubelet.conf").write_text(yaml.safe_dump(doc))
    return tmp_path


def test_load_remembers_every_file_and_the_certificate(layout: pathlib.Path) -> None:
    identity = kubeconfigs.load(layout / "kubelet.conf")
    names = [f.path.name for f in identity.files]
    assert names == [
        "kubelet.conf",
        "ca.crt",
        "kubelet-client-current.pem",
        "kubelet-client-current.pem",
    ]
    assert identity.files[2].target == str(layout / "pki" / "kubelet-client-1.pem")
    assert identity.subject == "system:node:a"
    assert identity.not_after is not None
    assert kubeconfigs.expiry(identity.not_after, datetime.datetime.now(datetime.UTC)) is (
        kubeconfigs.Expiry.VALID
    )
    assert "system:node:a" in identity.describe()
    assert not kubeconfigs.changed(identity.files)


def test_symlink_swap_is_a_change(layout: pathlib.Path) -> None:
    identity = kubeconfigs.load(layout / "kubelet.conf")
    directory = layout / "pki"
    cert, key = AUTHORITY.issue_client("system:node:b")
    (directory / "kubelet-client-2.pem").write_bytes(cert + key)
    (directory / "tmp").symlink_to("kubelet-client-2.pem")
    os.replace(directory / "tmp", directory / "kubelet-client-current.pem")
    assert kubeconfigs.changed(identity.files)
    assert kubeconfigs.load(layout / "kubelet.conf").subject == "system:node:b"


def test_rewrite_in_place_and_removal_are_changes(layout: pathlib.Path) -> None:
    identity = kubeconfigs.load(layout / "kubelet.conf")
    ca = layout / "ca.crt"
    st = ca.stat()
    ca.write_bytes(ca.read_bytes())  # same inode, same size
    os.utime(ca, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert kubeconfigs.changed(identity.files)
    identity = kubeconfigs.load(layout / "kubelet.conf")
    assert not kubeconfigs.changed(identity.files)
    (layout / "pki" / "kubelet-client-1.pem").unlink()  # the symlink dangles
    assert kubeconfigs.changed(identity.files)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda pem: pem[: len(pem) // 3], "not PEM"),  # cut inside the certificate
        (lambda pem: pem[: pem.index(b"-----BEGIN PRIVATE KEY")], "do not load"),  # no key yet
        (lambda pem: pem[: len(pem) - 40], "do not load"),  # cut inside the key
        (lambda pem: _other_certificate() + pem.split(b"-----END CERTIFICATE-----\n")[1],
         "do not load"),  # a new certificate with the old key
        (lambda pem: b"", "not PEM"),
        (lambda pem: pem + b"x" * kubeconfigs.MAX_FILE_BYTES, "larger than"),
    ],
)  # fmt: skip
def test_incomplete_certificate_files_fail_to_load(
    layout: pathlib.Path, damage: Callable[[bytes], bytes], message: str
) -> None:
    target = layout / "pki" / "kubelet-client-1.pem"
    target.write_bytes(damage(target.read_bytes()))
    with pytest.raises(kubeconfigs.KubeconfigError, match=message):
        kubeconfigs.load(layout / "kubelet.conf")


@pytest.mark.parametrize("content", ["", "\n", "  \n"])
def test_empty_token_file_fails_to_load(layout: pathlib.Path, content: str) -> None:
    kubeconfig = layout / "kubelet.conf"
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["users"][0]["user"] = {"tokenFile": "token"}
    kubeconfig.write_text(yaml.safe_dump(doc))
    (layout / "token").write_text(content)
    with pytest.raises(kubeconfigs.KubeconfigError, match="is empty"):
        kubeconfigs.load(kubeconfig)
    (layout / "token").write_text("abc\n")
    identity = kubeconfigs.load(kubeconfig)
    assert identity.token == "abc"
    assert [f.path.name for f in identity.files] == ["kubelet.conf", "ca.crt", "token"]


def test_a_deeply_nested_kubeconfig_fails_to_load(tmp_path: pathlib.Path) -> None:
    """Issue 27 item 6: PyYAML's composer recursed; 5,000 nested ``[`` were a
    ``RecursionError`` (a traceback at start), now a ``KubeconfigError``."""
    kubeconfig = tmp_path / "deep.conf"
    kubeconfig.write_text("clusters: " + "[" * 5_000 + "]" * 5_000 + "\n")
    with pytest.raises(kubeconfigs.KubeconfigError, match=r"not YAML: .*nested deeper than 200"):
        kubeconfigs.load(kubeconfig)

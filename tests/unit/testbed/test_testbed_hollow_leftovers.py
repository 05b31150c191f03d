"""What a stopped hollow kubelet leaves in /tmp is found from its log and its open sockets, and
only paths of kubemark's own forms are ever named for removal."""

from __future__ import annotations

import pathlib
import socket

import pytest

from yurthub.testing import hollownodes

LOG = (
    'I1206 19:32:10.100000   20831 file.go:68] "Adding static pod path" '
    'path="/tmp/hollow-kubelet.3413856961/static-pods562359050"\n'
)


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (LOG, pathlib.Path("/tmp/hollow-kubelet.3413856961")),
        ("I1206 nothing of the kind\n", None),
        # Not kubemark's form: never a directory to remove.
        ('"Adding static pod path" path="/etc/kubernetes/manifests"', None),
        ('"Adding static pod path" path="/tmp/static"', None),
        ('"Adding static pod path" path="/tmp/hollow-kubelet.1/../../etc/x"', None),
        ('"Adding static pod path" path="/tmp/hollow-kubelet.12/a/b"', None),
    ],
)
def test_root_dir(log: str, expected: pathlib.Path | None) -> None:
    assert hollownodes.root_dir(log) == expected


def test_a_restarted_kubelets_root_is_read_from_its_own_lines(tmp_path: pathlib.Path) -> None:
    """A restart appends to the log: the second kubelet's root is named after the first's."""
    log = tmp_path / "kubelet.log"
    log.write_text(LOG)
    second = log.stat().st_size
    with log.open("a") as f:
        f.write(LOG.replace("3413856961", "77"))
    assert hollownodes.kubelet_root(log, 0) == pathlib.Path("/tmp/hollow-kubelet.3413856961")
    assert hollownodes.kubelet_root(log, second) == pathlib.Path("/tmp/hollow-kubelet.77")
    assert hollownodes.kubelet_root(log, log.stat().st_size) is None  # not started yet
    assert hollownodes.kubelet_root(tmp_path / "none.log", 0) is None


def test_only_sockets_nothing_listens_on_are_removed(tmp_path: pathlib.Path) -> None:
    live = tmp_path / "kubelet_remote_1.sock"
    stale = tmp_path / "kubelet_remote_2.sock"
    other = tmp_path / "kubelet_remote_x.sock"  # not kubemark's form: never judged
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(live))
        listener.listen(4)
        for path in (stale, other):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
                gone.bind(str(path))  # the file stays after the socket closed
        assert hollownodes.remove_stale_runtime_sockets(tmp_path) == 1
        assert live.exists() and other.exists() and not stale.exists()
    assert hollownodes.remove_stale_runtime_sockets(tmp_path) == 1  # now the live one is not
    assert not live.exists()

"""yurthub.atomicfiles: the one atomic write of the hub and its commands."""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from yurthub import atomicfiles


def test_a_write_replaces_whole_with_the_mode_asked_whatever_the_umask(
    tmp_path: pathlib.Path,
) -> None:
    target = tmp_path / "key"
    target.write_bytes(b"old")
    old_umask = os.umask(0o077)
    try:
        atomicfiles.write(target, b"new", mode=0o644)
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]  # no staging file left


def test_a_named_staging_file_is_used_and_gone_after(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "hub.yaml"
    staging = tmp_path / ".hub.yaml.upgrading"
    atomicfiles.write(target, b"kind: Pod\n", staging=staging)
    assert target.read_bytes() == b"kind: Pod\n" and not staging.exists()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_failed_rename_leaves_the_old_file_and_no_staging_file(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "a-directory"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        atomicfiles.write(target, b"new")  # a file cannot replace a non-empty directory
    assert (target / "inside").read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"]


@pytest.mark.parametrize("staging_name", [".hub.yaml.tmp-1-0badf00d", ".hub.yaml.upgrading"])
def test_a_link_planted_at_the_staging_name_is_never_written_through(
    tmp_path: pathlib.Path, staging_name: str
) -> None:
    """Whoever can put a name in the directory cannot make the writer (root, for the static
    Pod path) write elsewhere: the staging name is made fresh, never opened through a link
    (default names are also unique to each write, so they cannot be guessed)."""
    target = tmp_path / "hub.yaml"
    target.write_bytes(b"old")
    victim = tmp_path / "elsewhere" / "shadow"
    victim.parent.mkdir()
    victim.write_bytes(b"victim")
    staging = tmp_path / staging_name
    staging.symlink_to(victim)
    atomicfiles.write(target, b"new", staging=staging)
    assert victim.read_bytes() == b"victim"
    assert not target.is_symlink() and target.read_bytes() == b"new"
    assert not os.path.lexists(staging)


def test_a_leftover_staging_file_is_replaced_not_reused(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "key"
    staging = tmp_path / ".key.upgrading"
    staging.write_bytes(b"a longer leftover of a crashed write")
    staging.chmod(0o666)
    atomicfiles.write(target, b"new", staging=staging)
    assert target.read_bytes() == b"new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not staging.exists()


def test_default_staging_names_are_unique_and_name_their_writer(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "kubeconfig"
    first, second = atomicfiles.temporary(target), atomicfiles.temporary(target)
    assert first != second and first.parent == tmp_path
    assert atomicfiles.writer_pid(first.name) == os.getpid()
    assert atomicfiles.writer_pid(".kubeconfig.tmp-123") == 123  # an older hub's name
    assert atomicfiles.writer_pid("kubeconfig") is None
    assert atomicfiles.writer_pid(".kubeconfig.tmp-x") is None

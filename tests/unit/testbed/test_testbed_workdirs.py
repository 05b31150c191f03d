"""Directories the demo and the cluster launcher make: only a marked one is ever cleared."""

from __future__ import annotations

import os
import pathlib

import pytest

from yurthub.testing import workdirs

MARKER = ".edgehub-test"


@pytest.mark.parametrize(
    ("names", "plan"),
    [
        (None, workdirs.Plan.CREATE),
        ([], workdirs.Plan.ADOPT),
        ([MARKER], workdirs.Plan.OURS),
        ([MARKER, "cache", "kubeconfig"], workdirs.Plan.OURS),
        (["notes.txt"], workdirs.Plan.REFUSE),
        ([".edgehub-other"], workdirs.Plan.REFUSE),  # another tool's directory is not ours
        ([".hidden"], workdirs.Plan.REFUSE),
    ],
)
def test_decide(names: list[str] | None, plan: workdirs.Plan) -> None:
    assert workdirs.decide(names, MARKER) is plan


def test_a_missing_directory_is_made_and_marked(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a" / "demo"
    assert workdirs.claim(path, MARKER, "made by a test", clear=True) is workdirs.Plan.CREATE
    assert os.listdir(path) == [MARKER]
    assert (path / MARKER).read_text() == "made by a test\n"
    assert (path.stat().st_mode & 0o777, (path / MARKER).stat().st_mode & 0o777) == (0o700, 0o600)


def test_an_empty_directory_is_adopted(tmp_path: pathlib.Path) -> None:
    (tmp_path / "demo").mkdir(mode=0o755)
    plan = workdirs.claim(tmp_path / "demo", MARKER, "x", clear=True)
    assert plan is workdirs.Plan.ADOPT
    assert os.listdir(tmp_path / "demo") == [MARKER]
    assert (tmp_path / "demo").stat().st_mode & 0o777 == 0o700


def test_a_marked_directory_is_cleared_only_when_asked(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "demo"
    workdirs.claim(path, MARKER, "x", clear=True)
    (path / "cache").mkdir()
    (path / "cache" / "db").write_text("old")
    assert workdirs.claim(path, MARKER, "x", clear=False) is workdirs.Plan.OURS
    assert sorted(os.listdir(path)) == sorted([MARKER, "cache"])
    assert workdirs.claim(path, MARKER, "x", clear=True) is workdirs.Plan.OURS
    assert os.listdir(path) == [MARKER]


@pytest.mark.parametrize("clear", [True, False])
def test_a_users_directory_is_refused_and_left_as_it_is(
    tmp_path: pathlib.Path, clear: bool
) -> None:
    path = tmp_path / "demo"
    (path / "photos").mkdir(parents=True, mode=0o755)
    (path / "notes.txt").write_text("mine")
    with pytest.raises(workdirs.NotOursError) as refused:
        workdirs.claim(path, MARKER, "x", clear=clear)
    assert str(refused.value) == (
        f"{path} holds files edgehub did not make (it has no {MARKER}); left as it is"
    )
    assert sorted(os.listdir(path)) == ["notes.txt", "photos"]
    assert (path / "notes.txt").read_text() == "mine"
    assert path.stat().st_mode & 0o777 == 0o755


def test_a_file_in_the_way_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "demo").write_text("mine")
    with pytest.raises(workdirs.NotOursError, match="is not a directory"):
        workdirs.check(tmp_path / "demo", MARKER)
    assert (tmp_path / "demo").read_text() == "mine"

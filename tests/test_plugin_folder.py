"""The copy of ftmatrix's plugin that every cell imports, in the shared temporary folder:
never one that is damaged, or that is not this user's alone."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from conftest import records_of, run

from ftmatrix.cell_launch import plugin_root
from ftmatrix.runner import current_python

PACKAGE = Path(__file__).parent.parent / "src" / "ftmatrix"


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def intact(root: Path) -> bool:
    return (root / "ftmatrix" / "cell" / "plugin.py").read_bytes() == (
        PACKAGE / "cell" / "plugin.py"
    ).read_bytes() and (root / "ftmatrix" / "cell" / "records.py").is_file()


def test_a_folder_a_temp_cleaner_emptied_in_part_is_not_used(temp: Path) -> None:
    first = plugin_root()
    assert first.parent == temp and intact(first)
    assert plugin_root() == first  # made once, then used as it is
    (first / "ftmatrix" / "cell" / "records.py").unlink()
    again = plugin_root()
    assert again != first and intact(again)
    assert not (first / "ftmatrix" / "cell" / "records.py").exists()  # left as it was


def test_a_folder_whose_code_was_changed_is_not_used(temp: Path) -> None:
    first = plugin_root()
    (first / "ftmatrix" / "cell" / "plugin.py").write_text("raise SystemExit('not ours')\n")
    again = plugin_root()
    assert again != first and intact(again)


def test_a_folder_others_may_write_into_is_not_used(temp: Path) -> None:
    first = plugin_root()
    (first / "ftmatrix" / "cell").chmod(0o777)  # anyone could add or swap a module
    again = plugin_root()
    assert again != first and intact(again)
    assert not (again / "ftmatrix" / "cell").stat().st_mode & 0o022


def test_a_link_in_the_folders_place_is_not_followed(temp: Path) -> None:
    first = plugin_root()
    elsewhere = temp / "elsewhere"
    first.rename(elsewhere)
    first.symlink_to(elsewhere)  # what it points to may change after the check
    again = plugin_root()
    assert again != first and not again.is_symlink() and intact(again)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_another_user_made_first_is_not_used(temp: Path) -> None:
    first = plugin_root()
    for path in [first, *first.rglob("*")]:
        os.chown(path, 65534, 65534)  # nobody's: its name can be known in advance
    again = plugin_root()
    assert again != first and again.stat().st_uid == os.getuid() and intact(again)


@pytest.mark.slow
def test_a_cell_runs_where_the_plugins_folder_was_damaged(tmp_path: Path) -> None:
    """Through a real run: every cell failed to import the plugin from a damaged copy."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    old = tempfile.tempdir
    tempfile.tempdir = str(temp)
    try:
        damaged = plugin_root()
    finally:
        tempfile.tempdir = old
    (damaged / "ftmatrix" / "cell" / "plugin.py").unlink()
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "matrix.yaml").write_text(
        f'python: ["{current_python()}"]\npackages:\n  six: ["1.17.0"]\n'
    )
    ran = run("cli", tmp_path, FTMATRIX_RUN_ID="20261127T080000Z", TMPDIR=str(temp))
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    assert [r["status"] for r in records_of(tmp_path / "out")] == ["pass"]

"""Hostile or unlucky inputs, each through the CLI and through nox: one message, its exit code,
never a traceback. The files are under tests/data/hostile/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ftmatrix.errors import ExitCode
from ftmatrix.interpreters import find_interpreters

ROOT = Path(__file__).parent.parent
HOSTILE = Path(__file__).parent / "data" / "hostile"
OK = HOSTILE / "known_issues_dup" / "matrix.yaml"

# (name, command, environment, what the message says, exit code)
CORPUS = [
    ("duplicate-keys", "plan", {"FTMATRIX_MATRIX": "duplicate_keys.yaml"},
     "the key 'six' is written twice in one mapping (lines 2 and 3)", ExitCode.CONFIG),
    ("not-utf8", "plan", {"FTMATRIX_MATRIX": "not_utf8.yaml"},
     "not UTF-8 text (byte 0xff at offset 24)", ExitCode.CONFIG),
    ("a-folder", "plan", {"FTMATRIX_MATRIX": "a_folder.yaml"},
     "a_folder.yaml: is a folder, where the matrix file (FTMATRIX_MATRIX) belongs (a file)",
     ExitCode.PATH_KIND),
    ("alias-bomb", "plan", {"FTMATRIX_MATRIX": "alias_bomb.yaml"},
     "expands to more than 100,000 values", ExitCode.CONFIG),
    ("deep", "plan", {"FTMATRIX_MATRIX": "deep.yaml"},
     "nested more than 32 levels deep", ExitCode.CONFIG),
    ("recursive-alias", "plan", {"FTMATRIX_MATRIX": "recursive_alias.yaml"},
     "recursive_alias.yaml:3:7: invalid YAML: an alias stands inside the value it names",
     ExitCode.CONFIG),
    ("support-option", "plan", {"FTMATRIX_MATRIX": "support_option.yaml"},
     "support[0]: '--index-url=http://127.0.0.1:9/simple' is not a PEP 508 requirement",
     ExitCode.CONFIG),
    ("axis-path", "plan", {"FTMATRIX_MATRIX": "axis_path.yaml"},
     "'../../etc/passwd' is not a distribution name", ExitCode.CONFIG),
    ("ttl", "plan", {"FTMATRIX_MATRIX": str(OK), "FTMATRIX_RESOLVE_TTL": "abc"},
     "FTMATRIX_RESOLVE_TTL='abc': expected seconds", ExitCode.SETTINGS),
    ("run-id", "plan", {"FTMATRIX_MATRIX": str(OK), "FTMATRIX_RUN_ID": "../../x"},
     "FTMATRIX_RUN_ID='../../x': a run id is a folder name", ExitCode.SETTINGS),
    ("out-is-a-file", "report", {"FTMATRIX_MATRIX": str(OK), "FTMATRIX_OUT": "README.md"},
     "FTMATRIX_OUT=", ExitCode.SETTINGS),
    ("known-issues-duplicate-keys", "report", {"FTMATRIX_MATRIX": str(OK), "FTMATRIX_OUT": "{tmp}"},
     "the key 'id' is written twice in one mapping", ExitCode.CONFIG),
    ("known-issues-workaround", "report",
     {"FTMATRIX_MATRIX": str(HOSTILE / "known_issues_workaround" / "matrix.yaml"), "FTMATRIX_OUT": "{tmp}"},
     "[0].workaround: must be text (what to do instead), got {'pin': 'six<1.17'}", ExitCode.CONFIG),
    ("workers", "plan", {"FTMATRIX_MATRIX": "workers.yaml"},
     "limits.workers: must be a whole number from 1 to 256 or 'auto' (one per CPU), got 100000",
     ExitCode.CONFIG),
    ("python-2.7", "plan", {"FTMATRIX_MATRIX": "python27.yaml"},
     "python[0]: '2.7': a cell's pytest and plugin need Python 3.9 or newer", ExitCode.CONFIG),
    ("twelve-axes", "plan", {"FTMATRIX_MATRIX": "twelve_axes.yaml"},
     "the axes make 1,000,000,000,000 combinations (10 six x 10 attrs", ExitCode.PLAN),
    ("default-python", "plan", {"FTMATRIX_MATRIX": str(OK), "FTMATRIX_PYTHON": "2"},
     "FTMATRIX_PYTHON='2': a Python version", ExitCode.SETTINGS),
    # NaN passes "> 0": a hanging case would never be killed.
    ("timeout-nan", "plan", {"FTMATRIX_MATRIX": "timeout_nan.yaml"},
     "timeouts.case: must be a number of seconds from 1 to 2,592,000 (30 days), got nan",
     ExitCode.CONFIG),
    ("memory-inf", "plan", {"FTMATRIX_MATRIX": "memory_inf.yaml"},
     "limits.memory-gib: must be a number of GiB from 0.0625 (64 MiB) to 1,048,576, got inf",
     ExitCode.CONFIG),
    ("version-5000-digits", "plan", {"FTMATRIX_MATRIX": "version_5000_digits.yaml"},
     "is not a valid version (PEP 440), nor 'none' (5,005 characters; a version has at most 200)",
     ExitCode.CONFIG),
    # A name that is not text once reached a join and a membership test: a TypeError.
    ("profile-number", "plan", {"FTMATRIX_MATRIX": "profile_number.yaml", "FTMATRIX_PROFILE": "1"},
     "profiles[1]: 1 is not a profile name: a profile's name is text of letters", ExitCode.CONFIG),
    ("default-profile-list", "plan", {"FTMATRIX_MATRIX": "default_profile_list.yaml"},
     "default-profile: must be the name of one of the profiles, got a list (['a'])",
     ExitCode.CONFIG),
    ("hardware-comma", "plan", {"FTMATRIX_MATRIX": "hardware_comma.yaml"},
     "hardware['a,b']: 'a,b' is not a hardware class name", ExitCode.CONFIG),
    # Two cells of one label: one records file, two nox sessions of one name.
    ("python-twice", "plan", {"FTMATRIX_MATRIX": "python_twice.yaml"},
     "python[1]: '3.11.0' is listed twice: python[0] is '3.11', the same version (PEP 440)",
     ExitCode.CONFIG),
    ("version-twice", "plan", {"FTMATRIX_MATRIX": "version_twice.yaml"},
     "packages.six[1]: 'v1.17.0' is listed twice: packages.six[0] is '1.17.0'", ExitCode.CONFIG),
    ("python-3.100", "plan", {"FTMATRIX_MATRIX": "python_3_100.yaml"},
     "python[0]: '3.100': a Python version as a cell label names it", ExitCode.CONFIG),
    ("shard-huge", "plan", {"FTMATRIX_MATRIX": str(OK), "FTMATRIX_SHARD": "1/" + "1" * 30},
     "and N at most 10,000", ExitCode.SETTINGS),
    ("resume-maybe", "plan", {"FTMATRIX_MATRIX": str(OK), "FTMATRIX_RESUME": "maybe"},
     "FTMATRIX_RESUME='maybe': expected yes or no: 1, true, yes, on or 0, false, no, off",
     ExitCode.SETTINGS),
    ("reuse-maybe", "plan", {"FTMATRIX_MATRIX": str(OK), "FTMATRIX_REUSE": "maybe"},
     "FTMATRIX_REUSE='maybe': expected yes or no", ExitCode.SETTINGS),
]  # fmt: skip


@pytest.mark.parametrize("entry", ["cli", "nox"])
@pytest.mark.parametrize(
    ("command", "env", "says", "code"),
    [pytest.param(*rest, id=name) for name, *rest in CORPUS],
)
def test_a_hostile_input_gets_one_message_and_its_exit_code(
    tmp_path: Path, entry: str, command: str, env: dict[str, str], says: str, code: int
) -> None:
    variables = {k: v.replace("{tmp}", str(tmp_path / "out")) for k, v in env.items()}
    if entry == "cli":
        argv = [sys.executable, "-m", "ftmatrix", command]
        argv += ["--no-resolve"] if command == "plan" else []
    else:
        argv = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", command]
        argv += ["--", "--no-resolve"] if command == "plan" else []
    # nox runs in the noxfile's folder: relative names are given from the corpus folder.
    absolute = {
        k: str(HOSTILE / v) if k in ("FTMATRIX_MATRIX", "FTMATRIX_OUT") and "/" not in v else v
        for k, v in variables.items()
    }
    ran = subprocess.run(
        argv, env={**os.environ, **absolute}, cwd=HOSTILE, capture_output=True, text=True,
        check=False, timeout=120,
    )  # fmt: skip
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-3000:]
    assert says in output, output[-3000:]
    assert ran.returncode == code, output[-3000:]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["bisect", "--case", "t.py::t", "--axis", "six", "--good", "abc", "--bad", "1.17.0"],
            "bisect --good 'abc': not a version",
        ),
        (
            [
                "bisect",
                "--case",
                "t.py::t",
                "--axis",
                "six",
                "--good",
                "1.16.0",
                "--bad",
                "1.17.0",
                "--hardware",
                "nope",
            ],
            "bisect --hardware 'nope': no such hardware class; classes: cpu",
        ),
        (
            [
                "bisect",
                "--case",
                "t.py::t",
                "--axis",
                "six",
                "--good",
                "1.16.0",
                "--bad",
                "1.17.0",
                "--python",
                "9.9",
            ],
            "bisect --python '9.9': uv finds no such interpreter",
        ),
        (["autobisect", "--budget", "-5", "--dry-run"], "'-5': expected a whole number >= 0"),
        (["autobisect", "--hardware", "", "--dry-run"], "--hardware '': "),
        (["ci-matrix", "--cells-per-shard", "0"], "'0': expected a whole number >= 1"),
    ],
)
def test_bad_arguments_are_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", *args],
        env={**os.environ, "FTMATRIX_MATRIX": str(OK), "FTMATRIX_OUT": str(tmp_path)},
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-3000:]
    assert says in output, output
    assert ran.returncode == ExitCode.USAGE


@pytest.mark.parametrize("entry", ["cli", "nox"])
@pytest.mark.parametrize("damage", ["not-a-database", "truncated"])
def test_a_damaged_history_is_one_message_saying_how_to_rebuild_it(
    tmp_path: Path, entry: str, damage: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    store = out / "history.sqlite"
    if damage == "not-a-database":
        store.write_bytes(b"garbage, not SQLite\n" * 200)
    else:  # a history cut off mid-write (a full disk, a killed copy)
        from conftest import make_record

        from ftmatrix.store import merge

        merge(store, [make_record(run_id=f"r{i}", cell_id=f"c{i}") for i in range(200)])
        store.write_bytes(store.read_bytes()[: store.stat().st_size // 2])
    argv = (
        [sys.executable, "-m", "ftmatrix", "report"]
        if entry == "cli"
        else [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "report"]
    )
    ran = subprocess.run(
        argv, env={**os.environ, "FTMATRIX_MATRIX": str(OK), "FTMATRIX_OUT": str(out)},
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-3000:]
    assert f"{store}: not a history this ftmatrix can read (" in output, output[-3000:]
    assert "`ftmatrix report` builds a new one from the records folder" in output
    assert (ran.returncode == ExitCode.HISTORY) if entry == "cli" else ran.returncode != 0


def _read_only_mounts() -> str | None:
    """Why a read-only bind mount cannot be made here (user and mount namespaces), or None."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    with tempfile.TemporaryDirectory() as folder:
        script = f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder}"
        probe = subprocess.run(
            ["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, check=False
        )
    return None if probe.returncode == 0 else f"no read-only bind mounts: {probe.stderr.strip()}"


@pytest.mark.skipif(_read_only_mounts() is not None, reason=str(_read_only_mounts()))
@pytest.mark.parametrize("entry", ["cli-run", "nox-matrix", "cli-report"])
def test_a_read_only_output_folder_gets_one_message_and_keeps_what_it_holds(
    tmp_path: Path, entry: str
) -> None:
    """Root ignores permission bits, so the folder is made read-only the way a runner's
    mount would be: a read-only bind mount, in a user namespace of the test's own."""
    out = tmp_path / "out"
    kept = out / "records" / "20261124T000000Z-aaaaaa" / "cell.jsonl"
    kept.parent.mkdir(parents=True)
    kept.write_text('{"kept": true}\n')
    command = {
        "cli-run": [sys.executable, "-m", "ftmatrix", "run"],
        "nox-matrix": [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "matrix",
                       "--envdir", str(tmp_path / "envs")],
        "cli-report": [sys.executable, "-m", "ftmatrix", "report", "--out", str(out)],
    }[entry]  # fmt: skip
    script = f'mount --bind {out} {out} && mount -o remount,ro,bind {out} {out} && exec "$@"'
    ran = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *command],
        env={**os.environ, "FTMATRIX_MATRIX": str(OK), "FTMATRIX_OUT": str(out)},
        cwd=HOSTILE, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-3000:]
    assert f"FTMATRIX_OUT={out}: cannot be written ({out}: Read-only file system)" in output
    assert ran.returncode == ExitCode.SETTINGS, output[-3000:]
    assert kept.read_text() == '{"kept": true}\n'


@pytest.mark.parametrize("entry", ["cli-run", "cli-plan", "nox-matrix"])
@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        # uv's own words are passed on; only what they must hold is asserted (uv's
        # wording changes between releases).
        ("UV_PYTHON_PREFERENCE", "bogus", "bogus"),
        ("UV_VENV_SEED", "maybe", "maybe"),
        ("UV_CACHE_DIR", "{tmp}/a-file", "a-file"),
    ],
)
def test_a_uv_setting_uv_refuses_stops_the_run_before_any_cell(
    tmp_path: Path, entry: str, variable: str, value: str, says: str
) -> None:
    """Every venv, install and interpreter search would fail (the plan called every Python
    missing; nox found no uv and printed a traceback per cell): one line, before any cell."""
    (tmp_path / "a-file").write_text("not a folder")
    argv = {
        "cli-run": [sys.executable, "-m", "ftmatrix", "run"],
        "cli-plan": [sys.executable, "-m", "ftmatrix", "plan"],
        "nox-matrix": [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
        + ["--envdir", str(tmp_path / ".nox"), "-s", "matrix"],
    }[entry]
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(OK),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        variable: value.replace("{tmp}", str(tmp_path)),
    }
    ran = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120
    )
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-3000:]
    assert "uv refuses this environment's settings" in output and says in output, output[-3000:]
    named = output.split("(UV_* variables set: ", 1)[1].split(")", 1)[0].split(", ")
    assert variable in named, output[-3000:]
    assert ran.returncode == ExitCode.SETTINGS, output[-3000:]
    assert not (tmp_path / "out" / "records").exists()  # no cell began


def test_a_broken_interpreter_first_on_path_is_named_not_called_absent(tmp_path: Path) -> None:
    """A python3.X that cannot run (a pyenv shim of a version not active, a copy missing
    its libpython) stops uv's search, hiding any working one after it on PATH: the cell's
    reason says which and why, not that the machine has none."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    broken = bin_folder / "python3.9"
    broken.write_text(
        "#!/bin/sh\necho 'libpython3.9.so.1.0: cannot open shared object' >&2\nexit 127\n"
    )
    broken.chmod(0o755)
    env = {"PATH": str(bin_folder), "UV_PYTHON_INSTALL_DIR": str(tmp_path / "none")}
    found = find_interpreters(["3.9"], env)["3.9"]
    assert found.path is None
    assert found.missing is not None
    assert found.missing.startswith("no usable Python 3.9 on this machine (")
    assert str(broken) in found.missing and "cannot open shared object" in found.missing


@pytest.mark.parametrize("mark", ["FTMATRIX_IN_RUN", "FTMATRIX_UV_CHECKED"])
def test_settings_checked_good_once_are_checked_again_where_they_differ(
    tmp_path: Path, mark: str
) -> None:
    # A command started inside a run (a run's marks in its environment) with a UV_*
    # setting of its own: the run's check was of other settings.
    from ftmatrix.pipeline import uv_settings_mark

    env = {
        **os.environ,
        mark: uv_settings_mark(os.environ),  # what a run's nox hands down for good settings
        "UV_VENV_SEED": "maybe",  # uv refuses it
        "FTMATRIX_MATRIX": str(OK),
        "FTMATRIX_CACHE_DIR": str(tmp_path / "cache"),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "plan"],  # (the check comes before the index)
        env=env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert "uv refuses this environment's settings" in ran.stderr, ran.stderr[-2000:]
    assert ran.returncode == 7


@pytest.mark.parametrize("entry", ["cli-run", "cli-plan", "nox-matrix"])
def test_a_uv_settings_file_uv_refuses_stops_the_run_before_any_cell(
    tmp_path: Path, entry: str
) -> None:
    """A uv.toml uv cannot read, in the folder nox makes the venvs in: every cell ended
    with no records and a report that said only that its job failed, uv's words in nox's
    output alone. One line, exit 7, before any cell. (A pyproject.toml's [tool.uv] uv
    cannot read is a warning of uv's: the cells run.)"""
    (tmp_path / "uv.toml").write_text("this is = = not toml\n")
    (tmp_path / "noxfile.py").write_text("from ftmatrix.sessions import *  # noqa: F403\n")
    argv = {
        "cli-run": [sys.executable, "-m", "ftmatrix", "run"],
        "cli-plan": [sys.executable, "-m", "ftmatrix", "plan"],
        "nox-matrix": [sys.executable, "-m", "nox", "-s", "matrix"],
    }[entry]
    env = {**os.environ, "FTMATRIX_MATRIX": str(OK), "FTMATRIX_OUT": str(tmp_path / "out")}
    ran = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120
    )
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output, output[-3000:]
    assert "uv refuses this environment's settings" in output, output[-3000:]
    assert "Failed to parse: uv.toml" in output, output[-3000:]
    assert ran.returncode == ExitCode.SETTINGS, output[-3000:]
    assert not (tmp_path / "out" / "records").exists()  # no cell began

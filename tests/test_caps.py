"""Declared caps: which requirement blocks a pin, and probes that install past it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftmatrix.caps import blocking_caps

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"

# unsloth 2026.10.7's own requirements on trl and transformers, and vllm 0.32.0's on torch.
UNSLOTH = [
    "trl!=0.19.0,<=1.15.0,>=0.18.2",
    "transformers!=4.53.0,<=5.17.0,>=4.52.4",
    "peft>=0.18.0",
    "bitsandbytes>=0.45.5; sys_platform == 'darwin' and extra == 'mac'",
]


def caps(requirements, pins, declarer="unsloth", version="2026.10.7"):
    return [
        c.describe() for c in blocking_caps(declarer, version, requirements, pins, python="3.11")
    ]


def test_an_upper_bound_the_pin_is_past_is_a_cap():
    assert caps(UNSLOTH, {"trl": "1.16.0", "transformers": "5.23.0"}) == [
        "unsloth 2026.10.7: trl<=1.15.0",
        "unsloth 2026.10.7: transformers<=5.17.0",
    ]


def test_an_exclusion_is_a_cap_and_a_lower_bound_is_not():
    assert caps(UNSLOTH, {"trl": "0.19.0"}) == ["unsloth 2026.10.7: trl!=0.19.0"]
    assert caps(UNSLOTH, {"trl": "0.17.0", "peft": "0.17.1"}) == []


def test_an_exact_pin_is_not_a_cap():
    # vllm is built against one torch: running it on another is not a probe worth making.
    assert caps(["torch==2.13.0"], {"torch": "2.14.1"}, "vllm", "0.32.0") == []


def test_a_series_is_a_cap_only_for_what_is_past_it():
    assert caps(["numpy==1.26.*"], {"numpy": "2.0.0"}, "a", "1") == ["a 1: numpy==1.26.*"]
    assert caps(["numpy==1.26.*"], {"numpy": "1.25.0"}, "a", "1") == []
    assert caps(["numpy~=1.26"], {"numpy": "2.1.0"}, "a", "1") == ["a 1: numpy~=1.26"]


def test_requirements_for_other_platforms_or_extras_do_not_count():
    assert caps(UNSLOTH, {"bitsandbytes": "0.40.0"}) == []
    assert caps(["six<1.16; python_version < '3.8'"], {"six": "1.17.0"}, "a", "1") == []


@pytest.mark.slow
def test_a_cell_blocked_by_a_cap_is_probed_past_it_and_shown_apart(tmp_path: Path):
    # requests 2.25.1 declares idna<3: its cell with idna 3.4 cannot install, the probe can.
    env = {
        **os.environ,
        "FTMATRIX_MATRIX": str(DATA / "cap_matrix.yaml"),
        "FTMATRIX_CASES": str(DATA / "cap_cases"),
        "FTMATRIX_OUT": str(tmp_path / "out"),
        "FTMATRIX_RUN_ID": "20261123T000000Z",
    }
    nox = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py")]
    ran = subprocess.run(
        [*nox, "-s", "matrix", "--envdir", str(tmp_path / "envs")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    records = {
        json.loads(line)["cell_label"]: json.loads(line)
        for path in (tmp_path / "out" / "records").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    }
    assert {label: r["status"] for label, r in records.items()} == {
        "cpu-py3.11-requests2.25.1-idna2.10": "pass",
        "cpu-py3.11-requests2.25.1-idna3.4": "uninstallable",
        "cpu-py3.11-requests2.25.1-idna3.4-pastcap": "pass",
    }
    probe = records["cpu-py3.11-requests2.25.1-idna3.4-pastcap"]
    assert probe["beyond_cap"] == "requests 2.25.1: idna<3"
    assert probe["packages"]["idna"] == "3.4"
    assert records["cpu-py3.11-requests2.25.1-idna2.10"]["beyond_cap"] is None

    html = (tmp_path / "out" / "index.html").read_text()
    grid = html.split("<h2 id=probes>")[0]
    assert "idna3.4-pastcap" not in grid.split("<h2>Failures")[0]  # never in the grid
    assert "installs only past requests&#x27;s cap idna&lt;3" in html
    assert "past it: idna pass" in html
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "installs only past requests's cap idna&lt;3; past it: idna pass" in summary
    caps_txt = (tmp_path / "out" / "constraints" / "caps.txt").read_text()
    assert (
        "# requests 2.25.1: idna<3  # cap could be raised to idna 3.4 (all cases pass); "
        "past it: idna pass; in cpu-py3.11-requests2.25.1-idna3.4-pastcap"
    ) in caps_txt
    # The plain constraints never count the probe.
    for path in (tmp_path / "out" / "constraints").glob("idna-*.json"):
        assert "pastcap" not in path.read_text()


def test_a_probe_is_kept_only_where_it_installs_past_the_cap():
    from ftmatrix.caps import plan_probes
    from ftmatrix.cell.status import Status
    from ftmatrix.config import parse_matrix
    from ftmatrix.plan import plan_cells
    from ftmatrix.resolve import Resolution

    plan = plan_cells(
        parse_matrix(
            "packages: {unsloth: ['2026.10.7'], trl: ['1.13.0', '1.16.0']}\n",
            source="m.yaml",
            default_python="3.11",
        )
    )
    requires = {("unsloth", "2026.10.7"): UNSLOTH}

    def lookup(package, version):
        return requires.get((package, version))

    def resolver(installs_past_the_cap):
        def resolve(cells):
            answers = []
            for cell in cells:
                blocked = cell.pin("trl") == "1.16.0" and not (
                    cell.overrides and installs_past_the_cap
                )
                answers.append(
                    Resolution(lock=None, status=Status.UNINSTALLABLE, reason="cap")
                    if blocked
                    else Resolution(lock="trl==1.16.0\n", status=None, reason=None)
                )
            return answers

        return resolve

    (probe,) = plan_probes(plan, lookup, resolver(installs_past_the_cap=True))
    assert probe.label == "cpu-py3.11-unsloth2026.10.7-trl1.16.0-pastcap"
    assert probe.overrides == ("trl==1.16.0",)
    assert probe.beyond_cap == "unsloth 2026.10.7: trl<=1.15.0"
    assert probe.id != plan.cells[1].id
    # Still refused with the cap lifted: some other conflict, never probed.
    assert plan_probes(plan, lookup, resolver(installs_past_the_cap=False)) == []
    # No cap declared (a lower bound, or metadata nowhere to be read): nothing to probe.
    assert plan_probes(plan, lambda p, v: None, resolver(installs_past_the_cap=True)) == []

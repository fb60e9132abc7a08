"""ftmatrix check: stacks read from real inputs, judged against the default matrix's real results.

tests/data/default_results.json is the results.json of a real run of the default matrix
(16 cells, 421 records; run 20261123T200742Z), copied as the report wrote it.
trl_env_*.txt are what `trl env` printed in real venvs of trl 1.16.0 and 0.19.1.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from conftest import make_record

from ftmatrix.cell.record import Record
from ftmatrix.cell.status import Status
from ftmatrix.check.results import Results, parse_results, read_results
from ftmatrix.check.stack import Stack, parse_freeze, parse_trl_env
from ftmatrix.check.verdict import check_stack
from ftmatrix.cli import main
from ftmatrix.errors import ExitCode, UsageError

DATA = Path(__file__).parent / "data"
RESULTS = DATA / "default_results.json"
FAILING = "cpu-py3.11-torch2.13.0-tf5.23.0-trl1.16.0-peft0.17.1-nounsloth"
PASSING = "cpu-py3.11-torch2.13.0-tf5.23.0-trl1.16.0-peft0.18.1-nounsloth"
PEFT_3333 = "https://github.com/huggingface/peft/issues/3333"


@cache
def results() -> Results:
    return read_results(str(RESULTS))


def freeze(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def run(tmp_path: Path, text: str, *extra: str, option: str = "--freeze") -> list[str]:
    stack = tmp_path / "stack.txt"
    stack.write_text(text)
    return ["check", option, str(stack), "--results", str(RESULTS), *extra]


# -- Reading stacks -----------------------------------------------------------------------


def test_a_freeze_keeps_pins_and_says_what_it_left_out():
    text = freeze(
        "# pip freeze of a training box",
        "torch==2.13.0+cpu",
        "Transformers==5.23.0  # inline comment",
        "peft @ https://files.example/peft-0.17.1-py3-none-any.whl#sha256=00",
        "trl @ git+https://github.com/huggingface/trl@main",
        "-e git+https://github.com/unslothai/unsloth@abc#egg=unsloth",
        "-e file:///home/me/project",
        "-i https://pypi.org/simple",
        "",
    )
    stack = parse_freeze(text, source="f.txt")
    assert dict(stack.packages) == {
        "torch": "2.13.0+cpu",
        "transformers": "5.23.0",
        "peft": "0.17.1",
    }
    assert dict(stack.unversioned) == {
        "trl": "installed from git+https://github.com/huggingface/trl@main (f.txt:5)",
        "unsloth": "editable (f.txt:6)",
    }
    assert stack.notes == (
        "f.txt:7: editable install without a name or version, left out: -e file:///home/me/project",
        "f.txt:8: option line, left out: -i https://pypi.org/simple",
    )
    # A complete listing: what it does not name is not installed; what it has no version
    # of is not known.
    assert (stack.knows("vllm"), stack.version("vllm")) == (True, None)
    assert not stack.knows("trl")


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("trl>=1.0", "f.txt:2: 'trl>=1.0' is not a pinned version"),
        ("trl", "f.txt:2: 'trl' is not a pinned version"),
        ("trl==1.*", "f.txt:2: 'trl==1.*' is not a pinned version"),
        ("trl = 1.16.0", "f.txt:2: 'trl = 1.16.0' is not a freeze line"),
        ("torch==2.13.0", "f.txt:2: 'torch==2.13.0': torch is listed twice (also at line 1)"),
    ],
)
def test_a_malformed_freeze_line_names_file_line_and_text(line: str, error: str):
    with pytest.raises(UsageError) as raised:
        parse_freeze(freeze("torch==2.13.0", line), source="f.txt")
    assert str(raised.value).startswith(error)


def test_the_real_trl_env_output_of_two_releases():
    new = parse_trl_env((DATA / "trl_env_1.16.0.txt").read_text(), source="new")
    assert dict(new.packages) == {
        "trl": "1.16.0",
        "torch": "2.13.0+cpu",
        "transformers": "5.23.0",
        "accelerate": "1.15.0",
        "datasets": "5.2.0",
        "huggingface-hub": "2.4.0",
        "peft": "0.17.1",
    }
    assert new.absent == {"bitsandbytes", "deepspeed", "liger-kernel", "vllm"}
    assert new.python == "3.11"
    # trl env names no unsloth: unknown, never assumed absent.
    assert not new.knows("unsloth") and new.knows("vllm") and new.version("vllm") is None
    old = parse_trl_env((DATA / "trl_env_0.19.1.txt").read_text(), source="old")
    assert (old.version("trl"), old.version("peft"), old.version("transformers")) == (
        "0.19.1",
        "0.18.1",
        "4.57.6",
    )
    assert {"diffusers", "llm-blender", "openai"} <= old.absent


def test_trl_env_output_given_as_a_freeze_says_which_option_reads_it():
    with pytest.raises(UsageError, match=r"use --trl-env\)$"):
        parse_freeze((DATA / "trl_env_1.16.0.txt").read_text(), source="env.txt")
    with pytest.raises(UsageError, match="not the output of `trl env`"):
        parse_trl_env("torch==2.13.0\n", source="f.txt")


# -- Verdicts against the default matrix's real results ----------------------------------


def test_the_stack_of_a_failing_cell_is_broken_with_the_known_issue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    text = freeze("torch==2.13.0+cpu", "transformers==5.23.0", "trl==1.16.0", "peft==0.17.1")
    assert main(run(tmp_path, text, "--operation", "sft")) == ExitCode.FAILED
    out = capsys.readouterr().out.splitlines()
    assert out[3] == ""
    assert out[4] == f"sft on cpu: broken: {FAILING} (your versions) breaks: 8 fail"
    assert out[5].startswith("  fail test_sft.py::test_sft_two_steps[completion-only-llama]: ")
    assert (
        "  known issue peft-hybridcache-removed: peft imports HybridCache from transformers at "
        f"import time, which transformers 5 removed {PEFT_3333}"
    ) in out
    assert "  constraint: peft!=0.17.1 with transformers==5.23.0 (constraints/sft-cpu.txt)" in out
    assert f"  nearest passing: {PASSING}, 1 version away: peft 0.17.1 -> 0.18.1" in out
    assert out[-1] == "summary: 1 broken (exit 1: broken sft on cpu)"


def test_the_stack_of_a_passing_cell_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    text = freeze("torch==2.13.0+cpu", "transformers==5.23.0", "trl==1.16.0", "peft==0.18.1")
    assert main(run(tmp_path, text)) == ExitCode.OK
    out = capsys.readouterr().out.splitlines()
    assert f"sft on cpu: pass: {PASSING} (your versions) passes: 8 pass" in out
    assert f"lora on cpu: pass: {PASSING} (your versions) passes: 8 pass" in out
    # A skip is not a pass: the two-GPU cases never ran on this CPU-only machine.
    assert (
        f"sft-multigpu on cpu: untested: {PASSING} (your versions) was not run on this "
        "hardware: 4 skip (needs 2 CUDA GPUs; this machine has no CUDA GPU)"
    ) in out
    assert out[-1] == "summary: 6 pass, 5 n/a, 1 untested (exit 0)"


def test_a_stack_one_version_away_gets_the_nearest_cells_and_how_far(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # transformers 5.22.0 never ran: between the two tested releases, one step from each.
    text = freeze("torch==2.13.0", "transformers==5.22.0", "trl==1.16.0", "peft==0.17.1")
    assert main(run(tmp_path, text, "--operation", "lora")) == ExitCode.OK
    out = capsys.readouterr().out.splitlines()
    assert out[4:] == [
        "lora on cpu: untested: no cell has your versions; the 2 nearest cells are 1 version away",
        f"  nearest: {FAILING} breaks: 8 fail; transformers 5.22.0 -> 5.23.0",
        "  nearest: cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0-peft0.17.1-nounsloth passes: "
        "8 pass; transformers 5.22.0 -> 4.57.6",
        "  fail test_lora.py::test_lora_forward_backward[gemma]: peft 0.17.1 imports "
        "HybridCache, which transformers 5.23.0 does not have",
        "  fail test_lora.py::test_lora_forward_backward[llama-grad-checkpointing]: peft 0.17.1 "
        "imports HybridCache, which transformers 5.23.0 does not have",
        "  fail test_lora.py::test_lora_forward_backward[llama]: peft 0.17.1 imports "
        "HybridCache, which transformers 5.23.0 does not have",
        "  ... and 5 more",
        "  known issue peft-hybridcache-removed: peft imports HybridCache from transformers at "
        f"import time, which transformers 5 removed {PEFT_3333} (in {FAILING})",
        "    workaround: peft 0.18.1 passes here with transformers 5 (peft 0.18.0 dropped the "
        "import, per Azure/azureml-assets#5002), or stay on transformers 4.57.x.",
        "  nearest passing: cpu-py3.11-torch2.13.0-tf4.57.6-trl1.16.0-peft0.17.1-nounsloth, "
        "1 version away: transformers 5.22.0 -> 4.57.6",
        "",
        "summary: 1 untested (exit 0)",
    ]


def test_a_derived_constraint_makes_an_untested_stack_broken():
    # torch 2.12.0 never ran, but the records show peft 0.17.1 breaks with transformers
    # 5.23.0 whatever else: the report's constraint applies to this stack.
    stack = parse_freeze(
        freeze("torch==2.12.0", "transformers==5.23.0", "trl==1.16.0", "peft==0.17.1"),
        source="f",
    )
    report = check_stack(stack, results(), operations=["sft"])
    (verdict,) = report.verdicts
    assert (verdict.verdict, verdict.exact, report.exit_code) == ("broken", False, 1)
    assert verdict.why == (
        "no cell has your versions; the nearest cell is 1 version away; peft!=0.17.1 "
        "(derived from the records) excludes yours"
    )
    assert [c.requirement for c in verdict.constraints] == ["peft!=0.17.1", "transformers!=5.23.0"]
    # Not where the other pin differs: the line is conditional on transformers 5.23.0.
    other = parse_freeze(
        freeze("torch==2.12.0", "transformers==4.57.6", "trl==1.16.0", "peft==0.17.1"),
        source="f",
    )
    assert check_stack(other, results(), operations=["sft"]).verdicts[0].constraints == ()


def test_check_derives_the_constraints_the_report_published():
    published = json.loads((DATA / "default_constraints_sft-cpu.json").read_text())
    (derived,) = [c for c in results().constraints if (c.operation, c.hardware) == ("sft", "cpu")]
    assert derived.to_dict() == published


def test_trl_env_compares_python_and_says_unsloth_is_not_named(
    capsys: pytest.CaptureFixture[str],
):
    argv = ["check", "--trl-env", str(DATA / "trl_env_0.19.1.txt"), "--results", str(RESULTS)]
    assert main([*argv, "--operation", "sft,dpo"]) == ExitCode.OK
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"  note: {DATA / 'trl_env_0.19.1.txt'}: accelerator(s): cpu"
    assert (
        out[3]
        == "compared on: peft, torch, transformers, trl, python; not named by your input: unsloth"
    )
    label = "cpu-py3.11-torch2.13.0-tf4.57.6-trl0.19.1-peft0.18.1-nounsloth"
    assert out[5] == f"dpo on cpu: pass: {label} (your versions) passes: 1 pass"
    assert out[7] == f"sft on cpu: pass: {label} (your versions) passes: 8 pass"


def test_cells_that_differ_only_where_the_input_is_silent_can_disagree():
    # trl env names no unsloth; with PyPI's torch 2.14.1 the default matrix has only
    # unsloth cells: 2026.10.7 ran (its LoRA broke in peft's torchao dispatcher),
    # 2026.10.9 could not be installed.
    text = (DATA / "trl_env_0.19.1.txt").read_text().replace("2.13.0+cpu", "2.14.1")
    stack = parse_trl_env(text, source="env")
    (verdict,) = check_stack(stack, results(), operations=["lora"]).verdicts
    assert verdict.verdict == "mixed"
    assert verdict.why == (
        "2 cells have your versions (they differ in unsloth, which your input does not name) "
        "and disagree"
    )
    assert [(m.label, m.verdict) for m in verdict.cells] == [
        ("cpu-py3.11-torch2.14.1-tf4.57.6-trl0.19.1-peft0.18.1-unsloth2026.10.7", "broken"),
        ("cpu-py3.11-torch2.14.1-tf4.57.6-trl0.19.1-peft0.18.1-unsloth2026.10.9", "untested"),
    ]
    assert [issue.upstream for issue, _ in verdict.known_issues] == [
        "https://github.com/unslothai/unsloth/pull/11168"
    ]


def test_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    text = freeze("torch==2.13.0+cpu", "transformers==5.23.0", "trl==1.16.0", "peft==0.17.1")
    assert main(run(tmp_path, text, "--operation", "dpo", "--json")) == 1
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {
        "schema",
        "exit_code",
        "stack",
        "results",
        "axes",
        "unknown_axes",
        "verdicts",
    }
    assert (payload["schema"], payload["exit_code"]) == (1, 1)
    assert payload["results"] == {
        "source": str(RESULTS),
        "runs": ["20261123T200742Z"],
        "records": 421,
        "cells": 16,
    }
    assert payload["axes"] == ["peft", "torch", "transformers", "trl", "unsloth"]
    assert payload["unknown_axes"] == ["python"]
    assert payload["stack"]["kind"] == "freeze"
    assert payload["stack"]["packages"]["peft"] == "0.17.1"
    (verdict,) = payload["verdicts"]
    assert set(verdict) == {
        "operation",
        "hardware",
        "verdict",
        "why",
        "exact",
        "cells",
        "nearest_passing",
        "known_issues",
        "constraints",
    }
    assert (verdict["operation"], verdict["hardware"], verdict["verdict"], verdict["exact"]) == (
        "dpo",
        "cpu",
        "broken",
        True,
    )
    (cell,) = verdict["cells"]
    assert cell["cell"] == FAILING
    assert (cell["distance"], cell["changes"], cell["counts"]) == (
        {"axes": 0, "versions": 0},
        [],
        {"fail": 1},
    )
    assert cell["cases"] == [
        {
            "case": "test_dpo.py::test_dpo_two_steps",
            "status": "fail",
            "flaky": False,
            "exception_type": "ImportError",
            "message": "peft 0.17.1 imports HybridCache, which transformers 5.23.0 does not have",
            "known_issue": "peft-hybridcache-removed",
            "known_issues": ["peft-hybridcache-removed"],
        }
    ]
    (passing,) = verdict["nearest_passing"]
    assert (passing["cell"], passing["distance"], passing["changes"]) == (
        PASSING,
        {"axes": 1, "versions": 1},
        [{"package": "peft", "yours": "0.17.1", "cell": "0.18.1", "versions": 1}],
    )
    (issue,) = verdict["known_issues"]
    assert (issue["id"], issue["upstream"], issue["cells"]) == (
        "peft-hybridcache-removed",
        PEFT_3333,
        [FAILING],
    )
    assert verdict["constraints"][0] == {
        "requirement": "peft!=0.17.1",
        "when": {"transformers": "5.23.0"},
        "file": "constraints/dpo-cpu.txt",
    }


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (
            ["--operation", "sfft"],
            "ftmatrix: --operation sfft: the results have no such operation (they have: dpo, "
            "grpo, grpo-vllm, import, lora, multiprocess, sft, sft-multigpu, unsloth-grpo, "
            "unsloth-qlora-qkv, unsloth-sft, vllm-generate)\n",
        ),
        (
            ["--hardware", "l4"],
            "ftmatrix: --hardware l4: the results have no such hardware class (they have: cpu)\n",
        ),
    ],
)
def test_a_filter_the_results_cannot_answer_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], error: str
):
    assert main(run(tmp_path, freeze("trl==1.16.0"), *extra)) == ExitCode.USAGE
    assert capsys.readouterr().err == error


def test_a_stack_without_any_tested_package_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    assert main(run(tmp_path, freeze("six==1.17.0"))) == ExitCode.USAGE
    assert capsys.readouterr().err == (
        f"ftmatrix: {tmp_path / 'stack.txt'}: none of the packages the results test is "
        "installed (peft, torch, transformers, trl, unsloth); is it the stack you meant? "
        "Check the environment you train in by its interpreter (--python VENV/bin/python; a "
        "cell's: --python .nox/CELL/bin/python), or pipe its freeze (uv pip freeze --python "
        "VENV/bin/python | ftmatrix check --freeze - ...).\n"
    )


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (
            {"schema": 0, "records": []},
            "schema 0, written by an older ftmatrix; this ftmatrix reads schema 1",
        ),
        (
            {"schema": 2, "records": []},
            "schema 2, written by a newer ftmatrix; this ftmatrix reads schema 1",
        ),
        ({"records": []}, "schema None; this ftmatrix reads schema 1"),
        ({"schema": True, "records": []}, "schema True; this ftmatrix reads schema 1"),
        ({"schema": 1.0, "records": []}, "schema 1.0; this ftmatrix reads schema 1"),
        ({"schema": 1}, "not the results.json of an ftmatrix report (no 'records')"),
        ([1, 2], "not the results.json of an ftmatrix report (no 'records')"),
        ({"schema": 1, "records": [{"schema": 1}]}, "records[0]: missing field(s): run_id"),
    ],
)
def test_results_that_are_not_a_readable_report(payload: object, error: str):
    with pytest.raises(UsageError) as raised:
        parse_results(payload, source="r.json")
    assert str(raised.value).startswith(f"--results r.json: {error}")


# -- The distance, on records of a made-up matrix -----------------------------------------


def test_releases_apart_hardware_classes_and_the_python_series():
    def cell(trl: str, hardware: str, status: Status, python: str = "3.11") -> Record:
        return make_record(
            cell_id=f"{hardware}{trl}",
            cell_label=f"{hardware}-py{python}-trl{trl}",
            pins={"trl": trl},
            python=python,
            hardware_class=hardware,
            status=status,
        )

    made = Results(
        source="made",
        runs=("r",),
        records=tuple(
            cell(trl, hw, Status.FAIL if (trl, hw) == ("1.16.0", "l4") else Status.PASS)
            for trl in ("0.19.1", "1.13.0", "1.16.0")
            for hw in ("cpu", "l4")
        ),
    )
    # 1.14.0 never ran: one release from 1.13.0 and from 1.16.0; the upgrade comes first.
    stack = parse_freeze("trl==1.14.0\n", source="f")
    report = check_stack(stack, made, hardware=["l4"])
    (verdict,) = report.verdicts
    assert (verdict.hardware, verdict.verdict, report.exit_code) == ("l4", "untested", 0)
    assert [(m.label, m.distance_text(), m.verdict) for m in verdict.cells] == [
        ("l4-py3.11-trl1.16.0", "1 version away: trl 1.14.0 -> 1.16.0", "broken"),
        ("l4-py3.11-trl1.13.0", "1 version away: trl 1.14.0 -> 1.13.0", "pass"),
    ]
    assert [m.label for m in verdict.nearest_passing] == ["l4-py3.11-trl1.13.0"]
    # 1.17.0, past every release tried: the nearest passing cell is two releases back.
    past = check_stack(parse_freeze("trl==1.17.0\n", source="f"), made, hardware=["l4"])
    (verdict,) = past.verdicts
    assert [m.label for m in verdict.cells] == ["l4-py3.11-trl1.16.0"]
    assert [m.distance_text() for m in verdict.nearest_passing] == [
        "2 versions away: trl 1.17.0 -> 1.13.0"
    ]
    # An interpreter's Python series is an axis: 3.12 is one step from the cells' 3.11.
    on_312 = Stack(source="py", kind="interpreter", packages={"trl": "1.16.0"}, python="3.12")
    (cpu,) = check_stack(on_312, made, hardware=["cpu"]).verdicts
    assert (cpu.verdict, cpu.cells[0].distance_text()) == (
        "untested",
        "1 version away: python 3.12 -> 3.11",
    )
    with pytest.raises(UsageError, match="--results made: holds no records"):
        check_stack(stack, Results(source="made", runs=(), records=()))

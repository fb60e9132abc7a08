"""known_issues.yaml: the shipped entries are valid and match the real messages they cite."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from conftest import DATA, make_record
from packaging.specifiers import SpecifierSet

from ftmatrix.cell.record import Record
from ftmatrix.cell.status import Status
from ftmatrix.config import ConfigError
from ftmatrix.known_issues import (
    case_parts,
    cell_statuses,
    contract_verdicts,
    explain,
    explain_all,
    load_known_issues,
    parse_known_issues,
)
from ftmatrix.proofs import unprovable_reason
from ftmatrix.report.causes import causes_of
from ftmatrix.report.failures import failure_groups
from ftmatrix.report.grid import build_grid
from ftmatrix.report.model import report_data
from ftmatrix.report.page import render_html
from ftmatrix.report.summary import render_markdown
from ftmatrix.repositories import REPOSITORIES, fix_repository, report_repository

KNOWN = load_known_issues(Path(__file__).parent.parent / "known_issues.yaml")


def failure(exception: str, message: str, packages: dict[str, str], frame: str | None = None):
    return make_record(
        status=Status.FAIL,
        exception_type=exception,
        message=message,
        packages=packages,
        framework_frame=frame,
    )


# Messages as reported upstream, with the sizes of the reporters' runs.
REAL = [
    (
        "unsloth-grpo-mistral-logits",
        failure(
            "torch._dynamo.exc.TorchRuntimeError",
            "Failed running call_function <built-in method matmul of type object at "
            "0x7f477665f1c0>(...): a and b must have same reduction dim, but got "
            "[s0, 32000] X [4096, 32000].",
            {"unsloth": "2025.2.12", "trl": "0.15.0"},
        ),
    ),
    (
        "unsloth-lora-qkv-dataparallel",
        failure(
            "RuntimeError",
            "Caught RuntimeError in replica 0 on device 0.\nOriginal Traceback ...\n"
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2158x4096 and 1x8388608)",
            {"unsloth": "2025.2.15"},
        ),
    ),
    (
        "trl-sft-dataparallel-batch",
        failure(
            "RuntimeError",
            "The size of tensor a (2) must match the size of tensor b (4) at "
            "non-singleton dimension 0",
            {"trl": "0.17.0"},
        ),
    ),
    (
        "trl-grpo-vllm-device-placement",
        failure(
            "RuntimeError",
            "Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:1 and cuda:0!",
            {"trl": "0.15.0", "vllm": "0.7.2"},
        ),
    ),
    (
        "grpo-rotary-length-off-by-one",
        failure(
            "RuntimeError",
            "The size of tensor a (1133) must match the size of tensor b (1134) at "
            "non-singleton dimension 2",
            {"trl": "0.15.0"},
            frame="transformers/models/qwen2/modeling_qwen2.py:apply_rotary_pos_emb",
        ),
    ),
]


# Seen by the default matrix here (trl 0.19.1 with transformers 5.23.0).
REAL += [
    (
        "trl-dpo-vision2seq-mapping-removed",
        failure(
            "RuntimeError",
            "Failed to import trl.trainer.dpo_trainer because of the following error (look up "
            "to see its traceback):\ncannot import name 'MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES' "
            "from 'transformers.models.auto.modeling_auto'",
            {"trl": "0.19.1", "transformers": "5.23.0"},
            frame="trl/import_utils.py:_get_module",
        ),
    ),
    (
        "trl-optional-imports-truthy-tuple",
        failure(
            "RuntimeError",
            "Failed to import trl.trainer.grpo_trainer because of the following error (look up "
            "to see its traceback):\nNo module named 'requests'",
            {"trl": "0.19.1", "transformers": "5.23.0"},
            frame="trl/import_utils.py:_get_module",
        ),
    ),
    # peft 0.17.1 with transformers 5.23.0: directly, and through trl's lazy import.
    (
        "peft-hybridcache-removed",
        failure(
            "ImportError",
            "cannot import name 'HybridCache' from 'transformers' (/tmp/ftm-run/.nox/matrix-cpu-"
            "py3-11/lib/python3.11/site-packages/transformers/__init__.py)",
            {"peft": "0.17.1", "transformers": "5.23.0"},
            frame="peft/peft_model.py:<module>",
        ),
    ),
    (
        "peft-hybridcache-removed",
        failure(
            "RuntimeError",
            "Failed to import trl.trainer.sft_trainer because of the following error (look up "
            "to see its traceback):\ncannot import name 'HybridCache' from 'transformers'",
            {"peft": "0.17.1", "transformers": "5.23.0", "trl": "0.19.1"},
            frame="trl/import_utils.py:_get_module",
        ),
    ),
    (
        "peft-torchao-linear-activation-removed",
        failure(
            "ImportError",
            "cannot import name 'LinearActivationQuantizedTensor' from 'torchao.quantization' "
            "(/tmp/ftm-run/.nox/matrix/lib/python3.11/site-packages/torchao/quantization/"
            "__init__.py)",
            {"peft": "0.18.1", "transformers": "4.57.6", "torchao": "0.18.0"},
            frame="peft/tuners/lora/torchao.py:dispatch_torchao",
        ),
    ),
]


def test_the_same_import_error_on_transformers_4_is_not_explained():
    record = failure(
        "RuntimeError", "No module named 'requests'", {"trl": "0.19.1", "transformers": "4.57.6"}
    )
    assert explain(record, KNOWN) is None


@pytest.mark.parametrize(("expected", "record"), REAL, ids=[r[0] for r in REAL])
def test_each_entry_matches_its_real_message(expected, record):
    entry = explain(record, KNOWN)
    assert entry is not None
    assert entry.id == expected


def test_a_break_with_the_package_absent_is_not_explained():
    record = failure(
        "RuntimeError",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:1 and cuda:0!",
        {"trl": "0.15.0"},  # no vllm in this cell: not the vLLM placement bug
    )
    assert explain(record, KNOWN) is None


def test_an_entry_whose_fixed_release_still_fails_is_flagged():
    (entry,) = parse_known_issues(
        [
            {
                "id": "x",
                "title": "t",
                "package": "trl",
                "upstream": "https://github.com/huggingface/trl/issues/1",
                "match": {"message": "boom", "packages": {"trl": ">=0"}},
                "fixed-in": {"trl": "0.20.0"},
            }
        ],
        source="k.yaml",
    )
    assert entry.still_failing_after_fix(failure("E", "boom", {"trl": "0.21.0"})) == [
        "trl 0.21.0 (fixed in 0.20.0)"
    ]
    assert entry.still_failing_after_fix(failure("E", "boom", {"trl": "0.19.1"})) == []


def test_signatures_match_directly():
    (entry,) = parse_known_issues(
        [
            {
                "id": "s",
                "title": "t",
                "package": "trl",
                "upstream": "https://github.com/huggingface/trl/issues/2",
                "match": {"signatures": ["abc123def456"]},
            }
        ],
        source="k.yaml",
    )
    assert entry.matches(make_record(status=Status.FAIL, signature="abc123def456"))
    assert not entry.matches(make_record(status=Status.FAIL, signature="000000000000"))


def test_bad_entries_are_all_reported_with_key_paths():
    with pytest.raises(ConfigError) as caught:
        parse_known_issues(
            [
                {
                    "id": "a",
                    "title": "t",
                    "package": "trl",
                    "upstream": "https://github.com/huggingface/trl/issues/3",
                    "match": {"message": "(unclosed"},
                },
                {
                    "id": "a",
                    "title": "t",
                    "package": "trl",
                    "upstream": "https://github.com/huggingface/trl/issues/3",
                    "match": {"mesage": "x"},
                    "fixed-in": {"trl": "soon"},
                },
            ],
            source="k.yaml",
        )
    assert caught.value.problems == (
        "k.yaml: [0].match.message: '(unclosed' is not a valid pattern: "
        "missing ), unterminated subpattern at position 0",
        "k.yaml: [1].id: 'a' is used by an earlier entry",
        "k.yaml: [1].fixed-in.trl: 'soon' is not a version",
        "k.yaml: [1].match.mesage: unknown key; allowed: signatures, exception, message, "
        "frame, packages, cases, contracts, parametrizations",
    )


def knob_failure(contracts: str, described: str, transformers: str):
    """A Trainer knob case's failure as cases/test_train.py words it (batch 2 x 2)."""
    step = f"one SGD step (batch 2 x 2, {described})"
    function = (
        "test_train_classification" if "classification" in described else "test_train_loss_options"
    )
    return replace(
        failure(
            "helpers.contracts.ContractError",
            f"contracts broken: {contracts}\n"
            f"exact_update: weights after {step} against minus the reference gradient, "
            "model.embed_tokens.weight at [12, 0] (largest gap 0.326): trainer 0.049522 != "
            "reference 0.0420865 (tolerance 1e-05)\n"
            f"update_scale: length of the SGD step (batch 2 x 2, {described}) along minus the "
            "reference gradient: trainer 1.78415 != reference 1 (tolerance 0.0001)",
            {"transformers": transformers},
        ),
        case=f"test_train.py::{function}[accumulation=2-{described.replace(', ', '-')}]",
    )


SMOOTHED = "causal LM, family=llama, label_smoothing_factor=0.1"
ALL_FOUR = "exact_update, update_direction, update_scale, accumulation"


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        # One over-counting cell (4.57.6): each failure group has its own entry.
        (knob_failure("exact_update, update_scale", "causal LM, family=gpt2", "4.57.6"),
         "transformers-num-items-over-count"),
        (knob_failure(ALL_FOUR, SMOOTHED, "4.57.6"), "transformers-label-smoothing-accumulation"),
        (knob_failure("exact_update, update_scale, accumulation",
                      "sequence classification, family=llama", "4.57.6"),
         "transformers-classification-heads-accumulation"),
        # Before 4.48.1 the heads and GPT-2 took the Trainer's other path.
        (knob_failure(ALL_FOUR, "causal LM, family=gpt2", "4.47.0"),
         "transformers-accumulation-no-loss-kwargs"),
        (knob_failure("exact_update, update_scale, accumulation",
                      "sequence classification, family=gpt2", "4.46.3"),
         "transformers-accumulation-no-loss-kwargs"),
        (knob_failure(ALL_FOUR, SMOOTHED, "4.47.0"), "transformers-label-smoothing-accumulation"),
        (knob_failure(ALL_FOUR, "causal LM, family=gpt2", "4.38.2"),
         "transformers-accumulation-per-micro-batch"),
        # Fixed releases: a red there is new, shown unexplained.
        (knob_failure(ALL_FOUR, SMOOTHED, "5.15.0"), None),
        (knob_failure("exact_update, update_scale", "causal LM, family=gpt2", "5.23.0"), None),
    ],
)  # fmt: skip
def test_each_trainer_knob_failure_group_has_its_own_entry(record, expected) -> None:
    entry = explain(record, KNOWN)
    assert (entry.id if entry else None) == expected


# Every shipped entry: the owning project's report (or none, said so), its fix in the
# repository of the package at fault or of the one it names fixed, seen-in links apart.
@pytest.mark.parametrize("entry", KNOWN, ids=[e.id for e in KNOWN])
def test_each_entry_links_its_owning_projects_report(entry):
    owner = REPOSITORIES[entry.package]
    assert entry.repository == owner
    if entry.upstream is None:  # said so, and the threads that report it are named
        assert entry.reported.startswith(f"no report in {owner} found"), entry.id
        assert entry.seen_in, "no owning report: the threads that report it are named"
    else:
        assert report_repository(entry.upstream) == owner
    if entry.fix is not None:
        fixers = {REPOSITORIES[p] for p in (entry.package, *entry.fixed_in)}
        assert fix_repository(entry.fix) in fixers
    assert all(link.startswith("https://") for link in entry.seen_in)
    assert entry.proof.hardware == "cpu" or unprovable_reason(entry), entry.id


def entry_with(**fields):
    base = {
        "id": "x",
        "title": "t",
        "package": "trl",
        "upstream": "https://github.com/huggingface/trl/issues/1",
        "match": {"message": "boom"},
    }
    return parse_known_issues([{**base, **fields}], source="k.yaml")


def test_an_upstream_outside_the_owning_repository_is_refused():
    with pytest.raises(ConfigError) as caught:
        entry_with(upstream="https://github.com/modelscope/ms-swift/issues/9343")
    assert caught.value.problems == (
        "k.yaml: [0].upstream: https://github.com/modelscope/ms-swift/issues/9343 is in "
        "modelscope/ms-swift, not in huggingface/trl (the repository of trl, whose code is at "
        "fault); put other threads under seen-in",
    )


def test_a_fix_elsewhere_a_blog_post_and_an_unknown_package_are_refused():
    with pytest.raises(ConfigError) as caught:
        parse_known_issues(
            [
                {
                    "id": "a",
                    "title": "t",
                    "package": "trl",
                    "upstream": "https://github.com/huggingface/blog/pull/2414",
                    "fix": "https://github.com/unslothai/unsloth/pull/5129",
                    "match": {"message": "x"},
                },
                {
                    "id": "b",
                    "title": "t",
                    "package": "mylib",
                    "upstream": None,
                    "match": {"message": "x"},
                },
            ],
            source="k.yaml",
        )
    assert caught.value.problems == (
        "k.yaml: [0].upstream: https://github.com/huggingface/blog/pull/2414 is in "
        "huggingface/blog, not in huggingface/trl (the repository of trl, whose code is at "
        "fault); put other threads under seen-in",
        "k.yaml: [0].fix: https://github.com/unslothai/unsloth/pull/5129 is in "
        "unslothai/unsloth, not in huggingface/trl (the faulty or the fixed package's "
        "repository)",
        "k.yaml: [1].upstream: null needs the threads that report it under seen-in",
        "k.yaml: [1].package: 'mylib' has no repository in the table; add it under "
        "repositories: (known: accelerate, bitsandbytes, datasets, peft, torch, torchao, "
        "transformers, trl, unsloth, unsloth-zoo, vllm)",
    )


def test_a_file_adds_the_repository_of_its_own_package():
    (entry,) = parse_known_issues(
        {
            "repositories": {"mylib": "me/mylib"},
            "issues": [
                {
                    "id": "m",
                    "title": "t",
                    "package": "mylib",
                    "upstream": "https://github.com/me/mylib/issues/7",
                    "fix": "https://github.com/me/mylib/commit/0123abc",
                    "match": {"message": "x"},
                }
            ],
        },
        source="k.yaml",
    )
    assert entry.repository == "me/mylib"


def test_a_fixed_release_inside_the_affected_range_is_refused():
    with pytest.raises(ConfigError) as caught:
        entry_with(affected={"trl": ">=0.14.0,<0.16.0"}, **{"fixed-in": {"trl": "0.15.2"}})
    assert caught.value.problems == (
        "k.yaml: [0].fixed-in.trl: 0.15.2 is inside affected trl<0.16.0,>=0.14.0",
    )


# Real records of test_train_exact_update (torch 2.13.0, tests/data/accumulation_records.jsonl):
# 4.45.2 exact at accumulation 1, off at 2 (per micro-batch mean); 4.46.3 and 4.48.1 off at
# both by the same factor (the over-count); 4.47.0 and 4.48.0 exact at 1 and off at 2 (the
# doubling); 4.46.1 exact at both. Every failing record has the same error signature.
ACCUMULATION = [
    Record.from_mapping(json.loads(line))
    for line in (DATA / "accumulation_records.jsonl").read_text().splitlines()
]


def causes_by_release(records, known=KNOWN):
    cells = cell_statuses(records)
    return {
        (r.packages["transformers"], case_parts(r.case)[1]): [
            e.id for e in explain_all(r, known, cells)
        ]
        for r in records
        if r.status is Status.FAIL
    }


def test_which_parametrisations_fail_together_picks_the_cause_not_the_message():
    assert len({r.signature for r in ACCUMULATION if r.signature}) == 1
    assert causes_by_release(ACCUMULATION) == {
        ("4.45.2", "accumulation-2"): ["transformers-accumulation-per-micro-batch"],
        ("4.46.3", "accumulation-1"): ["transformers-num-items-over-count"],
        ("4.46.3", "accumulation-2"): ["transformers-num-items-over-count"],
        ("4.47.0", "accumulation-2"): ["transformers-accumulation-loss-doubled"],
        ("4.48.0", "accumulation-2"): ["transformers-accumulation-loss-doubled"],
        ("4.48.1", "accumulation-1"): ["transformers-num-items-over-count"],
        ("4.48.1", "accumulation-2"): ["transformers-num-items-over-count"],
    }


def test_a_shape_no_entry_claims_is_unexplained_never_a_neighbours():
    # 4.47.0's doubling without its entry: inside the over-count's old range, but accumulation
    # 1 passes, so the over-count does not fit: unexplained.
    without = [e for e in KNOWN if e.id != "transformers-accumulation-loss-doubled"]
    assert causes_by_release(ACCUMULATION, without)[("4.47.0", "accumulation-2")] == []
    # Even with the over-count's range as it was claimed before (4.46.0 to 5.10.1, which
    # holds 4.47.0 and 4.48.0), the shape keeps it off the doubling's reds.
    wide = [
        dataclasses.replace(e, packages={"transformers": SpecifierSet(">=4.46.0,<5.10.1")})
        if e.id == "transformers-num-items-over-count"
        else e
        for e in without
    ]
    causes = causes_by_release(ACCUMULATION, wide)
    assert causes[("4.47.0", "accumulation-2")] == causes[("4.48.0", "accumulation-2")] == []
    assert causes[("4.46.3", "accumulation-1")] == ["transformers-num-items-over-count"]
    # A parametrisation that did not run cannot show the shape.
    alone = [r for r in ACCUMULATION if r.case.endswith("[accumulation-1]")]
    assert causes_by_release(alone)[("4.46.3", "accumulation-1")] == []


def test_the_report_groups_one_signature_by_its_causes(tmp_path: Path):
    groups = failure_groups(ACCUMULATION, KNOWN)
    by_cause = {
        tuple(c.id for c in g.causes): {r.cell_label[-8:] for r in g.records} for g in groups
    }
    assert by_cause == {
        ("transformers-num-items-over-count",): {"tf4.46.3", "tf4.48.1"},
        ("transformers-accumulation-loss-doubled",): {"tf4.47.0", "tf4.48.0"},
        ("transformers-accumulation-per-micro-batch",): {"tf4.45.2"},
    }
    grid = build_grid(ACCUMULATION)
    page = render_html(
        report_data(grid, generated_at=datetime(2026, 11, 27, tzinfo=UTC), groups=groups)
    )
    doubled = next(c for c in causes_of(groups) if c.known and c.known.id.endswith("doubled"))
    section = page[page.index(f'<section class=group id="{doubled.anchor}"') :]
    section = section[: section.index("</section>")]
    assert "transformers/issues/35663" in section and "46204" not in section
    assert "label tokens / (label tokens + rows)" not in section


def test_contract_verdicts_decide_where_the_case_records_them():
    over_count = next(e for e in KNOWN if e.id == "transformers-num-items-over-count")
    doubled = next(e for e in KNOWN if e.id == "transformers-accumulation-loss-doubled")
    message = (
        "contracts broken: exact_update, update_scale\n"
        "exact_update: weights after one SGD step (batch 2 x 2) against minus the reference "
        "gradient, w at [0] (largest gap 0.3): trainer 0.05 != reference 0.04 (tolerance 1e-05)"
    )

    def record(param, status, **metrics):
        return make_record(
            case=f"test_train.py::test_train_exact_update[{param}]",
            status=status,
            exception_type="helpers.contracts.ContractError",
            message=message if status is Status.FAIL else None,
            packages={"transformers": "4.48.0"},
            metrics=metrics,
        )

    one = record("accumulation-1", Status.PASS, exact_update_contract="pass")
    # The metrics say accumulation broke: the doubling's shape, and never the over-count's.
    two = record(
        "accumulation-2", Status.FAIL, exact_update_contract="fail", accumulation_contract="fail"
    )
    cells = cell_statuses([one, two])
    assert explain_all(two, KNOWN, cells) == (doubled,)
    # Accumulation held: the doubling does not fit, whatever the parametrisations say.
    held = record(
        "accumulation-2", Status.FAIL, exact_update_contract="fail", accumulation_contract="pass"
    )
    assert doubled not in explain_all(held, KNOWN, cell_statuses([one, held]))
    # Only the message's "contracts broken:" line: read as those contracts failing.
    assert contract_verdicts(make_record(message=message)) == {
        "exact_update": "fail",
        "update_scale": "fail",
    }
    assert over_count.failing_contracts == ("exact_update",)


def test_two_causes_in_one_record_are_both_shown():
    first, second = parse_known_issues(
        [
            {
                "id": "peft-side",
                "title": "peft half",
                "package": "peft",
                "upstream": "https://github.com/huggingface/peft/issues/1",
                "match": {"message": "boom", "packages": {"peft": "<1"}},
            },
            {
                "id": "transformers-side",
                "title": "transformers half",
                "package": "transformers",
                "upstream": "https://github.com/huggingface/transformers/issues/2",
                "match": {"message": "boom", "packages": {"transformers": ">=5"}},
            },
        ],
        source="k.yaml",
    )
    record = failure("RuntimeError", "boom", {"peft": "0.18.1", "transformers": "5.23.0"})
    (group,) = failure_groups([record], [first, second])
    assert [c.id for c in group.causes] == ["peft-side", "transformers-side"]
    markdown = render_markdown(
        report_data(
            build_grid([record]), generated_at=datetime(2026, 11, 27, tzinfo=UTC), groups=[group]
        )
    )
    assert "peft-side" in markdown and "transformers-side" in markdown


# Real records of test_import.py (torch 2.13.0, transformers 5.23.0; the proofs of
# 2026-11-27): one message, "No module named 'requests'", from two breaks. trl 0.19.1 imports
# requests under a flag transformers 5.3+ makes truthy, in trl/extras/vllm_client.py; trl
# 0.28.0 and 0.29.0 import it unguarded in trl/generation/vllm_client.py, and 0.28.0 shows
# the flag's break on DPOTrainer's `import weave` as well.
IMPORTS = [
    Record.from_mapping(json.loads(line))
    for line in (DATA / "import_records.jsonl").read_text().splitlines()
]


def test_one_message_from_two_files_is_two_causes():
    causes = {
        (r.packages["trl"], case_parts(r.case)[1]): [e.id for e in explain_all(r, KNOWN)]
        for r in IMPORTS
    }
    assert causes == {
        ("0.19.1", "trl.GRPOTrainer"): ["trl-optional-imports-truthy-tuple"],
        ("0.28.0", "trl"): ["trl-optional-imports-truthy-tuple"],
        # The unguarded import in trl/generation/vllm_client.py: no report of it exists, so
        # it is shown unexplained, never under the flag's words (known_issues.yaml says why).
        ("0.28.0", "trl.GRPOTrainer"): [],
        ("0.29.0", "trl.GRPOTrainer"): [],
    }
    # What a proof asks (the shape, wherever the versions are): 0.29.0's red is not the
    # flag's, so it does not contradict the flag's fix.
    flag = next(e for e in KNOWN if e.id == "trl-optional-imports-truthy-tuple")
    newest = next(r for r in IMPORTS if r.packages["trl"] == "0.29.0")
    assert not flag.matches(newest, in_range=False)


def test_the_frame_is_where_it_broke_not_the_importer_that_re_raised_it():
    def entry(frame: str):
        (parsed,) = parse_known_issues(
            [
                {
                    "id": "f",
                    "title": "t",
                    "package": "trl",
                    "upstream": "https://github.com/huggingface/trl/issues/1",
                    "match": {"message": "No module named 'requests'", "frame": frame},
                }
            ],
            source="k.yaml",
        )
        return parsed

    record = make_record(
        status=Status.FAIL,
        exception_type="RuntimeError",
        message="Failed to import trl.trainer.grpo_trainer because of the following error (look "
        "up to see its traceback):\nNo module named 'requests'",
        framework_frame="trl/import_utils.py:_get_module",
        root_exception_type="ModuleNotFoundError",
        root_message="No module named 'requests'",
        root_frame="trl/generation/vllm_client.py:<module>",
    )
    assert entry("trl/generation/").matches(record)
    assert not entry("trl/import_utils").matches(record)  # it only re-raised
    # A pattern at the frame's start: anywhere in trl but that file.
    elsewhere = entry("trl/(?!generation/vllm_client\\.py)")
    assert not elsewhere.matches(record)
    assert elsewhere.matches(replace(record, root_frame="trl/trainer/callbacks.py:<module>"))
    # A record without a root cause is judged by its own frame.
    assert entry("trl/import_utils").matches(replace(record, root_frame=None))


def test_an_entry_without_an_owning_report_says_so():
    (entry,) = entry_with(upstream=None, **{"seen-in": ["https://github.com/org/repo/issues/2"]})
    assert entry.reported == (
        "no report in huggingface/trl found; seen in https://github.com/org/repo/issues/2"
    )


def test_the_guides_frame_example_is_the_shipped_entries():
    guide = (Path(__file__).parent.parent / "docs" / "guides" / "known-issues.md").read_text()
    blocks = [yaml.safe_load(b.split("```", 1)[0]) for b in guide.split("```yaml\n")[1:]]
    example = next(b for b in blocks if b[0]["id"] == "trl-optional-imports-truthy-tuple")
    shipped = {e.id: e for e in KNOWN}
    for shown in example:
        entry = shipped[shown["id"]]
        assert entry.frame and shown["match"]["frame"] == entry.frame.pattern
        assert entry.message and shown["match"]["message"] == entry.message.pattern


def test_load_adapters_two_imports_are_two_causes_at_their_boundary():
    # Real records of test_adapter_roundtrip through load_adapter with peft 0.18.1 (the
    # proofs of 2026-11-27): 5.17.0 fails on the TP helper's import before it reaches the
    # weight conversion's; 5.18.0 no longer imports the helper.
    records = [
        Record.from_mapping(json.loads(line))
        for line in (DATA / "load_adapter_records.jsonl").read_text().splitlines()
    ]
    causes = {r.packages["transformers"]: [e.id for e in explain_all(r, KNOWN)] for r in records}
    assert causes == {
        "5.17.0": ["transformers-load-adapter-imports-peft-tp-helper"],
        "5.18.0": ["transformers-load-adapter-needs-peft-0.19"],
    }


def test_dpos_doubled_step_is_the_trainers_before_4_48_and_trls_after():
    # Real records of test_dpo_exact_update (the proofs of 2026-11-27): on transformers
    # 4.46.3 even trl 0.14.0 (which fixed DPO) steps exactly 2x at accumulation 2, as the
    # Trainer divides no trainer's own loss there; on 4.48.1, trl 0.13.0 does, trl's break.
    records = [
        Record.from_mapping(json.loads(line))
        for line in (DATA / "dpo_accumulation_records.jsonl").read_text().splitlines()
    ]
    assert {r.packages["trl"] for r in records} == {"0.13.0", "0.14.0"}
    assert causes_by_release(records) == {
        ("4.46.3", "accumulation-2"): ["transformers-custom-loss-accumulation-unscaled"],
        ("4.48.1", "accumulation-2"): ["trl-dpo-accumulation-unscaled"],
    }
    failed = next(r for r in records if r.status is Status.FAIL)
    assert contract_verdicts(failed)["update_direction"] == "pass"  # a longer step, not another


def adapter_causes(records):
    """(transformers, peft, the case's parameters) -> the entries that explain the record."""
    return {
        (r.packages["transformers"], r.packages["peft"], case_parts(r.case)[1]): [
            e.id for e in explain_all(r, KNOWN)
        ]
        for r in records
    }


def test_adapter_loading_is_transformers_break_before_5_18_and_peft_0_19s_after():
    # Real records of test_adapter_roundtrip: the GPU host's cell (an H200, torch
    # 2.11.0+cu130, transformers 5.17.0, peft 0.21.2) and the proofs of 2026-11-27 on CPU.
    # transformers before 5.18 drops the saved copies whatever peft does (#48595); peft 0.19
    # drops top-level modules' weights on 5.13 on (#3197); a LoRA on a tied head through
    # load_adapter on 5.0.0 is a third break, no report of which was found.
    records = [
        Record.from_mapping(json.loads(line))
        for line in (DATA / "adapter_roundtrip_records.jsonl").read_text().splitlines()
    ]
    dropped = ["transformers5-adapter-drops-modules-to-save"]
    top_level = ["peft-weight-conversion-drops-top-level-keys"]
    merged = ["peft-lora-on-tied-head-merge"]
    gpu = "modules_to_save={}-path={}-tie_word_embeddings={}-lora_on_embeddings={}".format
    tied_lora = gpu("none", "load_adapter", "true", "true")
    assert adapter_causes(records) == {
        ("5.17.0", "0.21.2", gpu("lm_head", "adapter_folder", "false", "true")): dropped,
        ("5.17.0", "0.21.2", gpu("embed_tokens", "load_adapter", "false", "false")): dropped,
        ("5.17.0", "0.21.2", gpu("score", "adapter_folder", "true", "false")): dropped,
        ("5.17.0", "0.21.2", gpu("lm_head", "load_adapter", "false", "false")): dropped,
        ("5.17.0", "0.21.2", gpu("embed_tokens", "adapter_folder", "false", "false")): dropped,
        ("5.17.0", "0.21.2", gpu("score", "load_adapter", "false", "false")): dropped,
        ("5.17.0", "0.21.2", gpu("none", "merge_save_reload", "true", "true")): merged,
        ("5.18.0", "0.21.2", gpu("none", "merge_save_reload", "true", "true")): merged,
        ("5.23.0", "0.19.1", tied_lora): top_level,
        ("5.23.0", "0.19.1", gpu("lm_head", "load_adapter", "false", "false")): top_level,
        ("5.0.0", "0.21.2", tied_lora): [],
    }
    assert {r.hardware_class for r in records} == {"h100", "cpu"}


def test_unsloths_mistral_without_xformers_is_not_the_seed_it_hides():
    # Real records of the GPU host's seed cells (torch 2.11.0+cu130, xformers 0.0.35 built for
    # 2.10): unsloth 2025.2.15 and 2025.3.1 both fail in the Mistral fast forward's mask,
    # before GRPO's loss; the seed's entry (#1790) must not claim either.
    records = [
        Record.from_mapping(json.loads(line))
        for line in (DATA / "unsloth_no_xformers_records.jsonl").read_text().splitlines()
    ]
    assert {r.packages["unsloth"] for r in records} == {"2025.2.15", "2025.3.1"}
    for record in records:
        assert [e.id for e in explain_all(record, KNOWN)] == [
            "unsloth-mistral-forward-needs-xformers"
        ]
    fixed = replace(records[0], packages={**records[0].packages, "unsloth": "2025.7.2"})
    assert explain_all(fixed, KNOWN) == ()
    # The same message from another file is not this break (llama.py guards its own use).
    elsewhere = replace(
        records[0],
        framework_frame="unsloth/models/llama.py:LlamaModel_fast_forward",
        root_frame="unsloth/models/llama.py:LlamaModel_fast_forward",
    )
    assert explain_all(elsewhere, KNOWN) == ()

"""known_issues.yaml: the shipped entries are valid and match the real messages they cite."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_record

from ftmatrix.cell.status import Status
from ftmatrix.config import ConfigError
from ftmatrix.known_issues import explain, load_known_issues, parse_known_issues

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
    assert entry.upstream.startswith("https://github.com/")


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
                "upstream": "https://github.com/o/r/issues/1",
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
                "upstream": "https://u",
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
                    "upstream": "https://u",
                    "match": {"message": "(unclosed"},
                },
                {
                    "id": "a",
                    "title": "t",
                    "upstream": "https://u",
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
        "k.yaml: [1].match.mesage: unknown key; allowed: signatures, exception, message, "
        "frame, packages",
        "k.yaml: [1].fixed-in.trl: 'soon' is not a version",
    )


def knob_failure(contracts: str, described: str, transformers: str):
    """A Trainer knob case's failure as cases/test_train.py words it (batch 2 x 2)."""
    step = f"one SGD step (batch 2 x 2, {described})"
    return failure(
        "_contracts.ContractError",
        f"contracts broken: {contracts}\n"
        f"exact_update: weights after {step} against minus the reference gradient, "
        "model.embed_tokens.weight at [12, 0] (largest gap 0.326): trainer 0.049522 != "
        "reference 0.0420865 (tolerance 1e-05)\n"
        f"update_scale: length of the SGD step (batch 2 x 2, {described}) along minus the "
        "reference gradient: trainer 1.78415 != reference 1 (tolerance 0.0001)",
        {"transformers": transformers},
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

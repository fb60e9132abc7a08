"""Error signatures fold the incidental and keep the cause."""

from __future__ import annotations

from ftmatrix.cell.signature import compute_signature, innermost_framework_frame, normalise_message

# The four breaks DESIGN.md names, each seen with different sizes or devices.
VARIANTS = [
    (
        "a and b must have same reduction dim, but got [s0, 32000] X [4096, 32000].",
        "a and b must have same reduction dim, but got [s1, 32768] X [5120, 32768].",
    ),
    (
        "mat1 and mat2 shapes cannot be multiplied (2158x4096 and 1x8388608)",
        "mat1 and mat2 shapes cannot be multiplied (1003x2048 and 1x2097152)",
    ),
    (
        "The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0",
        "The size of tensor a (8) must match the size of tensor b (16) at non-singleton dimension 1",
    ),
    (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:1 and cuda:0!",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cuda:3!",
    ),
]


def test_each_known_break_folds_to_one_signature():
    signatures = set()
    for first, second in VARIANTS:
        a = compute_signature("RuntimeError", first, "torch/_tensor.py:matmul")
        b = compute_signature("RuntimeError", second, "torch/_tensor.py:matmul")
        assert a == b
        signatures.add(a)
    assert len(signatures) == len(VARIANTS)


def test_type_and_frame_are_part_of_the_signature():
    message = VARIANTS[0][0]
    assert compute_signature("RuntimeError", message, "a.py:f") != compute_signature(
        "ValueError", message, "a.py:f"
    )
    assert compute_signature("RuntimeError", message, "a.py:f") != compute_signature(
        "RuntimeError", message, "b.py:f"
    )


def test_paths_and_addresses_fold():
    assert (
        normalise_message("cannot open /tmp/pytest-of-root/pytest-3/model/config.json at 0x7f3a2b")
        == "cannot open <path> at <addr>"
    )


def test_innermost_framework_frame_ignores_the_test_runner():
    files = [
        "/venv/lib/python3.11/site-packages/_pytest/python.py",
        "/repo/cases/test_sft.py",
        "/venv/lib/python3.11/site-packages/trl/trainer/sft_trainer.py",
        "/venv/lib/python3.11/site-packages/transformers/trainer.py",
        "/usr/lib/python3.11/json/decoder.py",
    ]
    functions = ["pyfunc_call", "test_sft", "__init__", "train", "decode"]
    assert innermost_framework_frame(files, functions) == "transformers/trainer.py:train"
    assert innermost_framework_frame(files[:2], functions[:2]) is None

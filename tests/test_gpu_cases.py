"""The plumbing of the GPU cases, run for real on a CPU: the processes a case starts, the
checks that unsloth's path ran, the tiny model vLLM serves, and the server's cleanup.

What needs a GPU (unsloth's kernels, vLLM's engine) is not run here; what decides a
GPU case's record is: a child's exception carried back with its type, blame and
message, a stubborn server killed without hiding the case's own failure, and the
unsloth checks refusing a stock peft model and a stock trl trainer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import run_plugin

from ftmatrix.cell.api import ChildProcessFailure, GpuLease
from ftmatrix.cell.gpu_lease import leased_devices
from ftmatrix.resolve import uv_binary

pytest_plugins = ["pytester"]

ROOT = Path(__file__).parent.parent
CASES = ROOT / "cases"
SEED_MESSAGE = "mat1 and mat2 shapes cannot be multiplied (2158x4096 and 1x8388608)"


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def processes() -> ModuleType:
    """cases/helpers/processes.py, as the cases import it."""
    return load(CASES / "helpers" / "processes.py", "helpers.processes")


# A child script as cases/scripts/ writes them, reporting through cases/helpers/processes.py:
# rank0.json on success, rank0.error.json on an exception.
CHILD = """
import os, sys
sys.path.insert(0, {cases!r})
from helpers.processes import run_reporting_errors, write_report

def main(what, out):
    if what == "ok":
        write_report(out, {{"loss": 0.5, "steps": 2}})
    elif what == "framework":
        from packaging.version import Version
        Version("not a version")
    elif what == "runtime":
        raise RuntimeError({message!r})
    elif what == "assert":
        assert False, "unsloth's path did not run: the trainer is trl's"
    elif what == "kill":
        os.kill(os.getpid(), 9)

run_reporting_errors(sys.argv[2], lambda: main(sys.argv[1], sys.argv[2]))
"""


@pytest.fixture
def child(tmp_path: Path) -> Path:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(cases=str(CASES), message=SEED_MESSAGE))
    return script


def run_child(processes: ModuleType, child: Path, what: str, out: Path) -> Any:
    return processes.run_ranks(
        [sys.executable, str(child), what, str(out)], out, env=dict(os.environ)
    )


def test_a_child_report_is_returned(processes: ModuleType, child: Path, tmp_path: Path):
    assert run_child(processes, child, "ok", tmp_path / "out") == [{"loss": 0.5, "steps": 2}]


@pytest.mark.parametrize(
    ("what", "expected_type", "message"),
    [
        ("runtime", "RuntimeError", SEED_MESSAGE),
        ("framework", "packaging.version.InvalidVersion", "Invalid version: 'not a version'"),
        ("assert", "AssertionError", "unsloth's path did not run: the trainer is trl's"),
    ],
)
def test_a_child_exception_is_raised_with_its_type_and_message(
    processes: ModuleType,
    child: Path,
    tmp_path: Path,
    what: str,
    expected_type: str,
    message: str,
):
    with pytest.raises(ChildProcessFailure) as raised:
        run_child(processes, child, what, tmp_path / "out")
    assert raised.value.exception_type == expected_type
    assert str(raised.value).startswith(message)


def test_a_child_killed_without_a_word_says_how(processes: ModuleType, child: Path, tmp_path: Path):
    with pytest.raises(ChildProcessFailure) as raised:
        run_child(processes, child, "kill", tmp_path / "out")
    assert raised.value.crashed == str(raised.value) == "a training process died: signal SIGKILL"


def test_the_lease_is_what_a_child_sees(monkeypatch: pytest.MonkeyPatch):
    env = {"FTMATRIX_GPU_LEASE": "2,3", "CUDA_VISIBLE_DEVICES": "2", "PATH": "/bin"}
    lease = GpuLease(devices=leased_devices(env))
    assert lease.devices == ("2", "3")
    assert lease.child_env(env)["CUDA_VISIBLE_DEVICES"] == "2,3"
    # The vLLM server case: the server on the second leased GPU, training on the first.
    assert lease.only(1).child_env(env)["CUDA_VISIBLE_DEVICES"] == "3"
    assert lease.only(0).child_env(env)["CUDA_VISIBLE_DEVICES"] == "2"
    # Without a runner's lease, the child sees what this process was shown...
    unleased = GpuLease(devices=None)
    assert unleased.child_env({"CUDA_VISIBLE_DEVICES": "1"})["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert unleased.only(1).child_env(env)["CUDA_VISIBLE_DEVICES"] == "6"
    # ...and with nothing restricting this process, the child is not restricted either.
    assert "CUDA_VISIBLE_DEVICES" not in unleased.child_env({"PATH": "/bin"})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert unleased.only(1).child_env(env)["CUDA_VISIBLE_DEVICES"] == "1"


def test_the_server_sees_the_second_leased_gpu(processes: ModuleType, tmp_path: Path):
    """A real server process started as test_grpo_vllm_server_on_a_second_gpu starts it."""
    seen = tmp_path / "seen"
    write_seen = f"import os; open({str(seen)!r}, 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"
    lease = GpuLease(devices=("2", "3"))
    with processes.serving([sys.executable, "-c", write_seen], env=lease.only(1).child_env()):
        deadline = time.monotonic() + 30
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    assert seen.read_text() == "3"


CASE_FILE = """
import os, sys

sys.path.insert(0, {cases!r})
from helpers.processes import run_ranks

def run(what, tmp_path):
    out = tmp_path / "out"
    return run_ranks([sys.executable, {child!r}, what, str(out)], out, env=dict(os.environ))

def test_runtime(tmp_path):
    run("runtime", tmp_path)

def test_framework(tmp_path):
    run("framework", tmp_path)

def test_assert(tmp_path):
    run("assert", tmp_path)

def test_kill(tmp_path):
    run("kill", tmp_path)
"""


def test_a_child_error_is_recorded_as_if_raised_in_the_case(
    pytester: pytest.Pytester, child: Path, tmp_path: Path
):
    """The record's exception type, message and blame are the child's (seed (b) and (c)
    known issues match on the type)."""
    pytester.makepyfile(test_children=CASE_FILE.format(cases=str(CASES), child=str(child)))
    records = run_plugin(pytester, tmp_path)
    runtime = records["test_runtime"]
    assert (runtime["exception_type"], runtime["message"]) == ("RuntimeError", SEED_MESSAGE)
    assert runtime["status"] == "error"  # raised by the child script itself: ours
    framework = records["test_framework"]
    assert framework["exception_type"] == "packaging.version.InvalidVersion"
    assert framework["status"] == "fail"  # raised inside an installed package
    assert framework["framework_frame"].startswith("packaging/version.py")
    assert records["test_assert"]["status"] == "fail"  # our check of their result
    assert records["test_assert"]["exception_type"] == "AssertionError"
    assert records["test_kill"]["status"] == "crash"


STUBBORN_SERVER = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True);"
    " time.sleep(120)",
]


def test_a_failing_case_keeps_its_failure_and_the_server_is_killed(processes: ModuleType):
    started = time.monotonic()
    stubborn = processes.serving(STUBBORN_SERVER, env=dict(os.environ), stop_timeout=1)
    with pytest.raises(ValueError, match="the case's own failure"), stubborn as server:
        time.sleep(0.5)  # the server has set its SIGTERM handler
        raise ValueError("the case's own failure")
    assert server.poll() == -9  # ignored SIGTERM, so killed
    assert time.monotonic() - started < 30


def test_a_passing_case_kills_a_server_that_will_not_stop(processes: ModuleType):
    with processes.serving(STUBBORN_SERVER, env=dict(os.environ), stop_timeout=1) as server:
        time.sleep(0.5)
    assert server.poll() == -9


def test_a_server_that_stops_is_only_terminated(processes: ModuleType):
    command = [sys.executable, "-c", "import time; time.sleep(120)"]
    with processes.serving(command, env=dict(os.environ), stop_timeout=30) as server:
        pass
    assert server.poll() == -15


# The seeds profile -------------------------------------------------------------------

SEED_CELLS = {
    # (hardware, transformers, trl, peft, unsloth, unsloth_zoo, vllm)
    ("l4", "4.49.0", "0.15.2", "0.14.0", "2025.2.15", "2025.2.7", None),  # (a) broken
    ("l4", "4.49.0", "0.15.2", "0.14.0", "2025.3.1", "2025.3.1", None),  # (a) fixed
    ("a100x2", "4.49.0", "0.15.2", "0.14.0", "2025.2.15", "2025.2.7", None),  # (a) on A100, (b)
    ("a100x2", "4.49.0", "0.15.2", "0.14.0", "2025.3.1", "2025.3.1", None),  # (a), (b)
    ("a100x2", "4.51.3", "0.17.0", "0.15.2", None, None, None),  # (c)
    ("a100x2", "4.48.1", "0.14.0", "0.14.0", None, None, "0.7.0"),  # (d)
}


def seed_cells() -> list[Any]:
    from ftmatrix.config import load_matrix
    from ftmatrix.plan import plan_cells

    matrix = load_matrix(ROOT / "matrix.yaml", profile="seeds", default_python="3.11")
    return list(plan_cells(matrix).cells)


def test_the_seeds_profile_plans_one_cell_per_seed():
    cells = seed_cells()
    keys = {
        (c.hardware, *(c.pin(p) for p in ("transformers", "trl", "peft", "unsloth")))
        + (c.pin("unsloth_zoo"), c.pin("vllm"))
        for c in cells
    }
    assert keys == SEED_CELLS
    assert {c.python for c in cells} == {"3.11"}
    for cell in cells:
        # Era-exact: nothing floats, so nothing drifts to a release of another year.
        assert cell.support == ()
        assert (cell.pin("torch"), cell.pin("bitsandbytes")) == ("2.5.1", "0.45.2")
        assert (cell.pin("accelerate"), cell.pin("datasets")) == ("1.4.0", "3.3.2")


@pytest.mark.slow
def test_every_seed_cell_installs_on_linux_x86_64_with_cuda(tmp_path: Path):
    """Real uv, frozen in time: each seed cell's pins resolve for manylinux x86-64, with
    PyPI's CUDA build of torch (its nvidia-* libraries in the lock); and the plan's own
    resolver calls every seed cell installable."""
    from ftmatrix.config import InstallOptions
    from ftmatrix.resolve import RUNNER_REQUIREMENTS, resolve_cell, run_uv

    env = {**os.environ, "UV_EXCLUDE_NEWER": "2026-11-01T00:00:00Z"}
    env["FTMATRIX_CACHE_DIR"] = str(tmp_path / "resolutions")
    for cell in seed_cells():
        resolution = resolve_cell(cell, InstallOptions(), env)
        assert resolution.lock is not None, (cell.label, resolution.reason)
        requirements = "\n".join([*cell.requirements(), *RUNNER_REQUIREMENTS]) + "\n"
        args = ["pip", "compile", "-", "--python-version", cell.python, "--no-header"]
        args += ["--quiet", "--python-platform", "x86_64-manylinux_2_28"]
        result = run_uv(args, env, stdin=requirements)
        assert result.returncode == 0, (cell.label, result.stderr[-2000:])
        lock = result.stdout
        assert "\ntorch==2.5.1\n" in f"\n{lock}", cell.label
        assert "nvidia-cuda-runtime-cu12==" in lock, cell.label
        for name, version in cell.pins:
            if version is not None:
                assert f"{name.lower().replace('_', '-')}=={version}" in lock, (cell.label, name)


# Checks of unsloth's path and the vLLM model, on real objects ----------------------------

REAL_OBJECTS = """
import json, sys
sys.path.insert(0, {cases!r})
import torch
from peft import LoraConfig, get_peft_model
from helpers.tiny import CORPUS, build_model, build_tokenizer, build_vllm_model, VLLM_HEAD_DIM
from helpers.compat import sft_config, tokenizer_argument
from datasets import Dataset
from trl import SFTTrainer
import test_unsloth

tokenizer = build_tokenizer()
model = get_peft_model(
    build_model("llama", tokenizer),
    LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj"]),
)
trainer = SFTTrainer(
    model=model,
    args=sft_config({out!r}, max_length=32, max_steps=1, use_cpu=True),
    train_dataset=Dataset.from_list([{{"text": line}} for line in CORPUS]),
    **tokenizer_argument(SFTTrainer, tokenizer),
)
gaps = test_unsloth.unsloth_path_gaps(
    trainer=trainer, trl_name="SFTTrainer", model=trainer.model, four_bit=True
)
try:
    test_unsloth.assert_unsloth_path(trainer=trainer, trl_name="SFTTrainer", model=trainer.model)
    raised = None
except AssertionError as error:
    raised = str(error)

served = build_vllm_model(tokenizer)
served.save_pretrained({out!r} + "/vllm")
print(json.dumps({{"gaps": gaps, "raised": raised, "head_dim": VLLM_HEAD_DIM}}))
"""


@pytest.fixture(scope="module")
def framework_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the CPU torch and the frameworks the default matrix pins (uv's cache)."""
    venv = tmp_path_factory.mktemp("frameworks") / "venv"
    env = dict(os.environ)
    subprocess.run([uv_binary(), "venv", "-q", "-p", "3.11", str(venv)], check=True, env=env)
    links = [
        arg for link in env.get("PIP_FIND_LINKS", "").split() for arg in ("--find-links", link)
    ]
    packages = ["torch==2.13.0", "transformers==4.57.6", "peft==0.18.1", "trl==0.19.1"]
    packages += ["accelerate", "datasets", "pytest"]
    subprocess.run(
        [
            uv_binary(),
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            *links,
            *packages,
        ],
        check=True,
        env=env,
    )
    return venv


@pytest.mark.slow
def test_a_stock_peft_model_and_trl_trainer_are_not_unsloths_path(
    framework_venv: Path, tmp_path: Path
):
    ran = subprocess.run(
        [
            str(framework_venv / "bin" / "python"),
            "-c",
            REAL_OBJECTS.format(cases=str(CASES), out=str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["gaps"] == [
        "the trainer is trl.trainer.sft_trainer.SFTTrainer, not unsloth's UnslothSFTTrainer",
        "LlamaAttention.forward is transformers.models.llama.modeling_llama.LlamaAttention"
        ".forward, not unsloth's",
        "q/k/v are torch.nn.modules.linear.Linear, not bitsandbytes Linear4bit",
    ]
    assert result["raised"].startswith("unsloth's path did not run: the trainer is trl.")

    # The model vLLM serves on its production kernels: head_dim 64, saved in bfloat16.
    saved = tmp_path / "vllm"
    config = json.loads((saved / "config.json").read_text())
    assert config["head_dim"] == result["head_dim"] == 64
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    header = safetensors_header(saved / "model.safetensors")
    assert {t["dtype"] for name, t in header.items() if name != "__metadata__"} == {"BF16"}


def safetensors_header(path: Path) -> dict[str, Any]:
    """The tensor table of a safetensors file (an 8-byte length, then JSON)."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, Any] = json.loads(handle.read(length))
    return header


DUMP_MARKS = """
import json

def pytest_collection_modifyitems(items):
    with open("marks.json", "w") as out:
        json.dump({i.name: {m.name: m.kwargs for m in i.iter_markers()} for i in items}, out)
"""


def test_every_unsloth_and_vllm_case_is_isolated_and_needs_cuda(pytester: pytest.Pytester):
    """Each runs in a process of its own, and is ``skip`` on a machine without CUDA."""
    pytester.makepyfile(dump_marks=DUMP_MARKS)
    files = [str(CASES / "test_unsloth.py"), str(CASES / "test_vllm.py")]
    # The results plugin registers the markers (a cell always loads it).
    pytester.runpytest_subprocess(
        "-p", "ftmatrix.cell.plugin", "-p", "dump_marks", "--collect-only", "-q", *files
    )  # fmt: skip
    marks = json.loads((pytester.path / "marks.json").read_text())
    assert len(marks) == 9  # 4 unsloth (GRPO twice: Llama, Mistral), 4 vLLM
    for case, case_marks in marks.items():
        assert "isolated" in case_marks, case
        assert case_marks["requires_hardware"].get("cuda") is True, case
        if case_marks["requires_hardware"].get("gpus", 1) > 1:
            assert "exclusive" in case_marks, case
    two_gpus = sorted(c for c, m in marks.items() if m["requires_hardware"].get("gpus") == 2)
    assert two_gpus == [
        "test_grpo_vllm_in_process_on_a_second_gpu",
        "test_grpo_vllm_server_on_a_second_gpu",
        "test_unsloth_4bit_qkv_lora_dataparallel",
    ]

"""vLLM: generation from a tiny model, and GRPO generating with vLLM (colocated, server, and
trl 0.14/0.15's in-process vLLM on a second GPU).

The model is one vLLM serves on its production attention backends (head_dim 64, bfloat16
weights, ``dtype="auto"``), not a toy only FlexAttention accepts. Each case runs in a
process of its own: vLLM keeps GPU memory and torch.distributed state after it returns.
"""

from __future__ import annotations

import math
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.processes import launch_command, run_ranks, serving

from ftmatrix.cell.api import GpuLease

SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = pytest.mark.isolated("vLLM keeps GPU memory and torch.distributed state")


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """A tiny Llama vLLM serves as it serves real ones, saved with its tokenizer."""
    from helpers.tiny import build_vllm_model

    path = tmp_path_factory.mktemp("tiny-vllm")
    build_vllm_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.operation("vllm-generate")
@pytest.mark.requires_packages(vllm=">=0.4")
@pytest.mark.requires_hardware(cuda=True)
def test_vllm_generates(vllm_model_dir: Path, record_property: Any):
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=str(vllm_model_dir),
        dtype="auto",  # the saved bfloat16, as users load their checkpoints
        gpu_memory_utilization=0.3,
        enforce_eager=True,
        max_model_len=64,
        seed=0,
    )
    outputs = llm.generate(
        ["hello world", "one two three"],
        SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True),
    )
    lengths = [len(o.outputs[0].token_ids) for o in outputs]
    record_property("tokens", sum(lengths))
    assert lengths == [8, 8], lengths


def grpo_with_vllm(model_dir: Path, tmp_path: Path, **vllm_options: Any) -> Any:
    from datasets import Dataset
    from helpers.compat import config_fields, grpo_config, tokenizer_argument
    from test_grpo import PROMPTS, reward_distinct_words
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    missing = [k for k in vllm_options if k not in config_fields(GRPOConfig)]
    if missing:
        from ftmatrix.cell.api import not_applicable

        not_applicable(f"this trl's GRPOConfig has no {', '.join(missing)}")
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=reward_distinct_words,
        args=grpo_config(str(tmp_path), use_vllm=True, **vllm_options),
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * 2]),
        **tokenizer_argument(GRPOTrainer, AutoTokenizer.from_pretrained(model_dir)),
    )
    trainer.train()
    logs = [e for e in trainer.state.log_history if "loss" in e]
    assert trainer.state.global_step == 2
    assert logs and all(math.isfinite(float(e["loss"])) for e in logs), logs
    return logs


@pytest.mark.operation("grpo-vllm")
@pytest.mark.requires_packages(trl=">=0.18", vllm=">=0.8")  # vllm_mode="colocate": trl 0.18
@pytest.mark.requires_hardware(cuda=True)
def test_grpo_vllm_colocate(vllm_model_dir: Path, tmp_path: Path, record_property: Any):
    logs = grpo_with_vllm(
        vllm_model_dir, tmp_path, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3
    )
    record_property("loss", float(logs[-1]["loss"]))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.operation("grpo-vllm")
@pytest.mark.requires_packages(trl=">=0.17", vllm=">=0.8")  # `trl vllm-serve`: trl 0.17
@pytest.mark.requires_hardware(cuda=True, gpus=2)
@pytest.mark.exclusive("a vLLM server on the lease's second GPU")
def test_grpo_vllm_server_on_a_second_gpu(
    vllm_model_dir: Path, tmp_path: Path, gpu_lease: GpuLease, record_property: Any
):
    """Server mode: vLLM on the lease's second GPU, training here on the first (the
    one GPU this process sees).

    The server is stopped whatever the case did, and stopping it never replaces the
    case's own result (a failure stays that failure; a server that will not stop is killed).
    """
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "trl.scripts.vllm_serve",
        *("--model", str(vllm_model_dir), "--host", "127.0.0.1", "--port", str(port)),
        *("--gpu_memory_utilization", "0.3"),
    ]
    with serving(command, env=gpu_lease.only(1).child_env()) as server:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, "trl vllm-serve exited before listening"
            time.sleep(1)
        logs = grpo_with_vllm(
            vllm_model_dir,
            tmp_path,
            vllm_mode="server",
            vllm_server_host="127.0.0.1",
            vllm_server_port=port,
        )
    record_property("loss", float(logs[-1]["loss"]))


@pytest.mark.operation("grpo-vllm")
# `vllm_device`: trl 0.14 and 0.15 run vLLM inside the training process on the GPU it
# names; 0.16 deprecated it for `trl vllm-serve` (and ignores it), 0.18 removed it.
@pytest.mark.requires_packages(trl=">=0.14,<0.16", vllm=">=0.6")
@pytest.mark.requires_hardware(cuda=True, gpus=2)
@pytest.mark.exclusive("training on the lease's first GPU, vLLM on its second")
def test_grpo_vllm_in_process_on_a_second_gpu(
    vllm_model_dir: Path, tmp_path: Path, gpu_lease: GpuLease, record_property: Any
):
    """One training process on cuda:0, its vLLM engine on ``vllm_device="cuda:1"``: seed
    (d), `Expected all tensors to be on the same device ... cuda:1 and cuda:0` with
    vLLM before 0.7.1 (huggingface/trl#2851, #2766). The child sees the whole lease;
    its exception is this case's."""
    out = tmp_path / "child"
    script = [str(SCRIPTS / "grpo_vllm_device.py"), str(vllm_model_dir), str(out)]
    # One process under torchrun, as `accelerate launch --num_processes 1` would start it.
    (report,) = run_ranks(launch_command("torchrun", 1, script), out, env=gpu_lease.child_env())
    record_property("loss", report["loss"])
    assert report["steps"] == 2, report
    assert math.isfinite(report["loss"]), report

"""vLLM: generation from the tiny model, and GRPO generating with vLLM (colocated, server)."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.operation("vllm-generate")
@pytest.mark.requires_packages(vllm=">=0.4")
@pytest.mark.requires_hardware(cuda=True)
def test_vllm_generates(tiny_model_dir: Path, record_property: Any):
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=str(tiny_model_dir),
        dtype="float32",
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
    from _compat import config_fields, grpo_config, tokenizer_argument
    from datasets import Dataset
    from test_grpo import PROMPTS, reward_distinct_words
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    missing = [k for k in vllm_options if k not in config_fields(GRPOConfig)]
    if missing:
        from ftmatrix.pytest_plugin import not_applicable

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
def test_grpo_vllm_colocate(tiny_model_dir: Path, tmp_path: Path, record_property: Any):
    logs = grpo_with_vllm(
        tiny_model_dir, tmp_path, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3
    )
    record_property("loss", float(logs[-1]["loss"]))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.operation("grpo-vllm")
@pytest.mark.requires_packages(trl=">=0.17", vllm=">=0.8")  # `trl vllm-serve`: trl 0.17
@pytest.mark.requires_hardware(cuda=True, gpus=2)
def test_grpo_vllm_server_on_a_second_gpu(
    tiny_model_dir: Path, tmp_path: Path, record_property: Any
):
    """Server mode: vLLM on GPU 1, training on GPU 0 (device placement across two GPUs)."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trl.scripts.vllm_serve",
            "--model",
            str(tiny_model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--gpu_memory_utilization",
            "0.3",
        ],
        env={
            **os.environ,
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0,1").split(",")[-1],
        },
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, "trl vllm-serve exited before listening"
            time.sleep(1)
        logs = grpo_with_vllm(
            tiny_model_dir,
            tmp_path,
            vllm_mode="server",
            vllm_server_host="127.0.0.1",
            vllm_server_port=port,
        )
        record_property("loss", float(logs[-1]["loss"]))
    finally:
        server.terminate()
        server.wait(timeout=60)

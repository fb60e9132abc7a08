"""trl 0.14/0.15 GRPO with vLLM inside the training process, on ``vllm_device="cuda:1"``.

Run by cases/test_vllm.py under torchrun with one process and the cell's two leased
GPUs visible: training on cuda:0, vLLM's engine on cuda:1, the setting of seed (d)
(huggingface/trl#2851). argv: the tiny model's folder, the folder to report into.
Reports through cases/helpers/processes.py: rank0.json, or rank0.error.json.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # cases/: helpers, test_grpo


def main(model_dir: str, out_dir: str) -> None:
    from datasets import Dataset
    from helpers.compat import grpo_config, tokenizer_argument
    from helpers.processes import write_report
    from test_grpo import PROMPTS, reward_distinct_words
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=reward_distinct_words,
        args=grpo_config(
            tempfile.mkdtemp(),
            use_vllm=True,
            vllm_device="cuda:1",
            vllm_gpu_memory_utilization=0.3,
        ),
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * 2]),
        **tokenizer_argument(GRPOTrainer, AutoTokenizer.from_pretrained(model_dir)),
    )
    result = trainer.train()
    write_report(out_dir, {"loss": float(result.training_loss), "steps": trainer.state.global_step})


if __name__ == "__main__":
    from helpers.processes import run_reporting_errors

    run_reporting_errors(sys.argv[2], lambda: main(sys.argv[1], sys.argv[2]))

"""SFT or GRPO, two steps, in every process of a distributed launch; each rank reports.

Run by cases/test_multiprocess.py under `accelerate launch` (or torchrun, or plain
python): argv is the tiny model's folder, the folder to write rank reports into,
and the operation (sft, sft-lora-packed or grpo). Without CUDA the run asks for
the CPU, which accelerate turns into gloo across the processes. Each rank reports
through cases/helpers/processes.py: rank<N>.json, or rank<N>.error.json when it raises.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # cases/: helpers


def build_trainer(operation: str, model_dir: str) -> object:
    import torch
    from datasets import Dataset
    from helpers.compat import grpo_config, sft_arguments, tokenizer_argument
    from helpers.tiny import CORPUS
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    on_cpu = {"use_cpu": not torch.cuda.is_available()}
    if operation == "grpo":
        from test_grpo import PROMPTS, reward_distinct_words
        from trl import GRPOTrainer

        return GRPOTrainer(
            model=model,
            reward_funcs=reward_distinct_words,
            args=grpo_config(tempfile.mkdtemp(), **on_cpu),
            train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS * 2]),
            **tokenizer_argument(GRPOTrainer, tokenizer),
        )
    from trl import SFTTrainer

    dataset = Dataset.from_list([{"text": line} for line in CORPUS * 4])
    # SFTConfig from trl 0.9; before it TrainingArguments plus SFTTrainer's own settings.
    settings: dict[str, Any] = {"max_steps": 2, **on_cpu}
    extra: dict[str, Any] = {}
    if operation == "sft-lora-packed":
        # huggingface/trl#3392's shape: packed sequences into a LoRA adapter, with
        # gradient checkpointing and accumulation.
        from peft import LoraConfig

        settings |= {
            "packing": True,
            "gradient_checkpointing": True,
            "gradient_accumulation_steps": 2,
        }
        extra["peft_config"] = LoraConfig(
            r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        )
    arguments = sft_arguments(tempfile.mkdtemp(), max_length=32, **settings)
    packing = arguments.get("packing", getattr(arguments["args"], "packing", False))
    if settings.get("packing") and not packing:
        raise RuntimeError("this trl's SFTTrainer has no packing")  # the case relies on it
    return SFTTrainer(
        model=model,
        train_dataset=dataset,
        **arguments,
        **extra,
        **tokenizer_argument(SFTTrainer, tokenizer),
    )


def main(model_dir: str, out_dir: str, operation: str) -> None:
    import torch
    from helpers.processes import write_report

    trainer: Any = build_trainer(operation, model_dir)
    result = trainer.train()
    weights = b"".join(
        p.detach().cpu().to(torch.float32).numpy().tobytes()
        for _, p in sorted(trainer.model.named_parameters())
    )
    write_report(
        out_dir,
        {
            "rank": int(os.environ.get("RANK", "0")),
            "world_size": trainer.args.world_size,
            "loss": float(result.training_loss),
            "steps": trainer.state.global_step,
            "weights_sha": hashlib.sha256(weights).hexdigest(),
        },
    )


if __name__ == "__main__":
    from helpers.processes import run_reporting_errors

    run_reporting_errors(sys.argv[2], lambda: main(sys.argv[1], sys.argv[2], sys.argv[3]))

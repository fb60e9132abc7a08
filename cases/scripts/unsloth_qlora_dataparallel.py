"""unsloth 4-bit QKV LoRA with offloaded gradient checkpointing, under plain `python`.

Run by cases/test_unsloth.py with every GPU of the cell's lease visible: with two,
transformers' Trainer wraps the model in DataParallel, the setting of seed (b)
(unslothai/unsloth#1875). argv: the tiny model's folder, the folder to report into.
Reports through cases/helpers/processes.py: rank0.json, or rank0.error.json.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

CASES = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, CASES)  # helpers, test_unsloth


def main(model_dir: str, out_dir: str) -> None:
    import unsloth  # noqa: F401 -- first: it patches transformers and trl on import
    from helpers.processes import write_report
    from test_unsloth import QKV, lora_sft_trainer

    trainer = lora_sft_trainer(
        Path(model_dir), tempfile.mkdtemp(), targets=list(QKV), four_bit=True
    )
    result = trainer.train()
    write_report(
        out_dir,
        {
            "loss": float(result.training_loss),
            "steps": trainer.state.global_step,
            "n_gpu": trainer.args.n_gpu,  # 2: the run was DataParallel
        },
    )


if __name__ == "__main__":
    from helpers.processes import run_reporting_errors

    run_reporting_errors(sys.argv[2], lambda: main(sys.argv[1], sys.argv[2]))

"""Which repository owns a package's code: where its own reports and fixes live.

A known issue's ``upstream`` is a report in the repository of the package whose code is
at fault, and its ``fix`` a pull request or commit there (or in the repository of the
package its ``fixed-in`` names). This table is the one place that says which repository
that is; a known_issues.yaml adds its own packages under ``repositories:``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from packaging.utils import canonicalize_name

REPOSITORIES: Mapping[str, str] = {
    "torch": "pytorch/pytorch",
    "transformers": "huggingface/transformers",
    "trl": "huggingface/trl",
    "peft": "huggingface/peft",
    "accelerate": "huggingface/accelerate",
    "datasets": "huggingface/datasets",
    "bitsandbytes": "bitsandbytes-foundation/bitsandbytes",
    "unsloth": "unslothai/unsloth",
    "unsloth-zoo": "unslothai/unsloth-zoo",
    "vllm": "vllm-project/vllm",
    "torchao": "pytorch/ao",
}

_REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_REPORT = re.compile(r"^https://github\.com/([^/\s]+/[^/\s]+)/(issues|pull)/(\d+)(#\S*)?$")
_FIX = re.compile(
    r"^https://github\.com/([^/\s]+/[^/\s]+)/(pull/\d+|commit/[0-9a-f]{7,40})(#\S*)?$"
)


def repository_table(added: Mapping[str, str] | None = None) -> dict[str, str]:
    """The table, with a file's own ``repositories:`` (canonical package names) over it."""
    table: dict[str, str] = {canonicalize_name(k): v for k, v in REPOSITORIES.items()}
    table.update({canonicalize_name(k): v for k, v in (added or {}).items()})
    return table


def is_repository(text: str) -> bool:
    """``owner/name`` as GitHub spells a repository."""
    return bool(_REPOSITORY.match(text))


def report_repository(url: str) -> str | None:
    """The ``owner/name`` of a GitHub issue or pull request URL; None for anything else."""
    found = _REPORT.match(url)
    return found[1] if found else None


def fix_repository(url: str) -> str | None:
    """The ``owner/name`` of a GitHub pull request or commit URL; None for anything else."""
    found = _FIX.match(url)
    return found[1] if found else None


def same_repository(a: str, b: str) -> bool:
    return a.lower() == b.lower()

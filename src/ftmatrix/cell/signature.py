"""Error signatures: the same break seen in many cells folds to one short hash.

A signature is the exception type, the message with its incidental details
folded (numbers, sizes, addresses, paths, device ordinals, quoted names of
temporary files), and the innermost traceback frame that lies inside a
framework package, hashed. Runs inside cells: standard library only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

# Order matters: paths and addresses before bare numbers.
_FOLDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+-]+){2,}/?"), "<path>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b(cuda|xpu|mps|npu):\d+\b"), r"\1:<n>"),
    (re.compile(r"\bs\d+\b"), "<sym>"),  # torch.compile symbolic sizes: s0, s1
    (re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def normalise_message(message: str) -> str:
    """Fold what varies between occurrences of the same break into placeholders."""
    text = message.strip().splitlines()[0] if message.strip() else ""
    for pattern, replacement in _FOLDS:
        text = pattern.sub(replacement, text)
    return text.strip()


def innermost_framework_frame(
    filenames: Iterable[str], function_names: Iterable[str]
) -> str | None:
    """``package/module.py:function`` of the deepest frame inside an installed package."""
    found = None
    for filename, function in zip(filenames, function_names, strict=True):
        module = framework_module(filename)
        if module is not None:
            found = f"{module}:{function}"
    return found


def compute_signature(exception_type: str, message: str, framework_frame: str | None) -> str:
    """A 12-character hash; equal for the same break whatever the sizes or devices."""
    key = "\n".join([exception_type, normalise_message(message), framework_frame or ""])
    return hashlib.sha256(key.encode()).hexdigest()[:12]


# The test runner's own frames wrap every case; they never locate a break.
_RUNNER_PACKAGES = ("_pytest/", "pytest/", "pluggy/", "ftmatrix/")


def framework_module(filename: str) -> str | None:
    """``trl/trainer/sft_trainer.py`` for a file of an installed package, else None.

    The test runner's own packages are not frameworks: they wrap every case.
    """
    normalised = filename.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in normalised:
            module = normalised.rsplit(marker, 1)[1]
            return None if module.startswith(_RUNNER_PACKAGES) else module
    return None

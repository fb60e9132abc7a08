"""What ftmatrix itself prints on the console, masked as everything published is.

A CI job's console log is public. pytest's output is masked line by line as a cell prints
it (``supervise``); the texts ftmatrix makes of its own pass here: a cell's notes (uv's
stderr in an install-error names the index URL it failed to reach, a token in its path)
and the case ids the progress lines name (a parametrize id may hold a secret's value or a
machine path; the running case's id comes raw from the plugin's note, not from a masked
record). A case id is shown as the published record shows it: masked, its paths replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ftmatrix.cell.redact import Redactor, current_redactor
from ftmatrix.cell.signature import clean_paths


def masked_log(log: Callable[[str], None], env: Mapping[str, str]) -> Callable[[str], None]:
    """``log`` with every secret of ``env`` masked in each text it is given."""
    redactor = Redactor(env, remember=False)  # the environment scanned once, not per line
    return lambda text: log(redactor.text(text))


def masked(text: str) -> str:
    """``text`` with every secret of this process's environment masked."""
    return current_redactor().text(text)


def shown_case(case: str) -> str:
    """A case's id as a console line may show it: masked, machine paths replaced."""
    return clean_paths(current_redactor().text(case))


def shown_cases(cases: Iterable[str]) -> list[str]:
    """:func:`shown_case` of each of ``cases``, the environment looked at once (a poll
    finds hundreds of quick cases at once, and each look copies the environment)."""
    redactor = current_redactor()
    return [clean_paths(redactor.text(case)) for case in cases]

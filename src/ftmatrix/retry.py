"""Trying again while a failure looks transient: one rule for the resolver, the installs
and the wheelhouse's downloads.

Pure over what it is given: the action, the test of a transient result, and the sleep
(a parameter, so tests pass one that records instead of waiting).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

# Seconds between tries: a network hiccup is usually over in a few seconds; a third
# failure in ten seconds is not a hiccup.
RETRY_DELAYS = (2.0, 8.0)

_T = TypeVar("_T")
_Item = TypeVar("_Item")


def retried(
    action: Callable[[], _T],
    transient: Callable[[_T], bool],
    *,
    sleep: Callable[[float], None],
    before_retry: Callable[[float], None] | None = None,
    delays: Sequence[float] = RETRY_DELAYS,
) -> _T:
    """``action()``, tried again after each of ``delays`` while its result is transient;
    the last result (transient or not) is returned. ``before_retry`` hears each delay."""
    result = action()
    for delay in delays:
        if not transient(result):
            break
        if before_retry is not None:
            before_retry(delay)
        sleep(delay)
        result = action()
    return result


def retried_each(
    items: Sequence[_Item],
    action: Callable[[Sequence[_Item]], Sequence[_T]],
    transient: Callable[[_T], bool],
    *,
    sleep: Callable[[float], None],
    delays: Sequence[float] = RETRY_DELAYS,
) -> list[_T]:
    """``action(items)`` (one answer per item, in order), asked again for only the items
    whose answer is transient, after each of ``delays``."""
    answers = list(action(items))
    for delay in delays:
        again = [i for i, answer in enumerate(answers) if transient(answer)]
        if not again:
            break
        sleep(delay)
        for i, answer in zip(again, action([items[i] for i in again]), strict=True):
            answers[i] = answer
    return answers

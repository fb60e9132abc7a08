"""One retry rule for the resolver, the installs and the downloads (ftmatrix.retry)."""

from __future__ import annotations

from ftmatrix.retry import RETRY_DELAYS, retried, retried_each


def test_a_transient_failure_is_tried_again_after_each_delay_until_it_passes() -> None:
    answers = iter(["reset", "reset", "ok"])
    slept: list[float] = []
    heard: list[float] = []
    result = retried(
        lambda: next(answers), lambda a: a == "reset", sleep=slept.append, before_retry=heard.append
    )
    assert result == "ok"
    assert slept == heard == list(RETRY_DELAYS)


def test_a_lasting_failure_returns_the_last_answer_after_every_delay() -> None:
    tries: list[int] = []
    result = retried(
        lambda: tries.append(1) or "reset", lambda a: a == "reset", sleep=lambda _: None
    )
    assert result == "reset"
    assert len(tries) == 1 + len(RETRY_DELAYS)


def test_a_final_answer_is_not_tried_again() -> None:
    slept: list[float] = []
    assert retried(lambda: "unsatisfiable", lambda a: a == "reset", sleep=slept.append) == (
        "unsatisfiable"
    )
    assert slept == []


def test_only_the_items_with_a_transient_answer_are_asked_again() -> None:
    asked: list[list[str]] = []
    flaky = {"b": 1}

    def resolve(items: list[str]) -> list[str]:
        asked.append(list(items))
        answers = []
        for item in items:
            if flaky.get(item, 0) > 0:
                flaky[item] -= 1
                answers.append("timed out")
            else:
                answers.append(f"{item} ok")
        return answers

    result = retried_each(
        ["a", "b", "c"], resolve, lambda a: a == "timed out", sleep=lambda _: None
    )
    assert result == ["a ok", "b ok", "c ok"]
    assert asked == [["a", "b", "c"], ["b"]]

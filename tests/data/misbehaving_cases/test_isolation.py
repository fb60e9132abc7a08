"""The same failures in the case's own process and in a process of its own (isolated).

An isolated case's record must read as the in-process one does (status, exception,
frame, signature, metrics); a crash as test_misbehave.py's segfault does. And what
an isolated case leaves behind (a variable, a patched module) never reaches another.
"""

import ctypes
import os
import string

import pytest


def framework_failure(record_property) -> None:
    record_property("loss", 0.25)
    from packaging.version import Version

    Version("not a version")  # raised inside an installed package: fail


@pytest.mark.operation("isolation")
def test_i_fails_in_process(record_property):
    framework_failure(record_property)


@pytest.mark.operation("isolation")
@pytest.mark.isolated("must read as the in-process failure")
def test_i_fails_isolated(record_property):
    framework_failure(record_property)


@pytest.mark.operation("segfault")
@pytest.mark.isolated("must read as the in-process segfault")
def test_j_segfaults_isolated():
    ctypes.string_at(0)


@pytest.mark.operation("isolation")
@pytest.mark.isolated("patches on purpose")
def test_k_leaves_state_behind():
    os.environ["FTMATRIX_LEAKED"] = "1"
    string.capwords = lambda *args, **kwargs: "patched"


@pytest.mark.operation("isolation")
@pytest.mark.isolated("must not see what the case before it left")
def test_l_finds_nothing_left_behind():
    assert "FTMATRIX_LEAKED" not in os.environ, "an earlier case's variable leaked in"
    assert string.capwords("a b") == "A B", "an earlier case's patch leaked in"

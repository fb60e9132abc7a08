"""Cases for the tool's own tests: each produces one known status in a real cell."""

import pytest


@pytest.mark.operation("import")
def test_six_imports(record_property):
    import six

    record_property("six_version", six.__version__)
    assert six.PY3


@pytest.mark.operation("attrs-frozen")
@pytest.mark.requires_packages(attrs=">=25")
def test_attrs_feature_gated():
    import attrs

    @attrs.frozen
    class Point:
        x: int

    assert Point(1).x == 1


@pytest.mark.operation("gpu")
@pytest.mark.requires_hardware(cuda=True, gpus=2)
def test_needs_two_gpus():
    raise AssertionError("never runs without two GPUs")


@pytest.mark.operation("wrong-result")
def test_framework_result_is_checked():
    import six

    # A check that fails on six 1.16.0 only: the "framework" gives a wrong result.
    assert six.__version__ != "1.16.0", "six 1.16.0 gives the wrong answer"


@pytest.mark.operation("framework-raises")
def test_framework_raises():
    import six

    six.ensure_str(123)  # raises TypeError inside six.py


@pytest.mark.operation("our-bug")
def test_case_bug():
    undefined_name_in_our_case

"""The selected case: each run of it leaves a line in FTMATRIX_REUSE_LOG."""

import sys

import six
from helpers import note_run


def test_counted():
    note_run(f"{sys.prefix} six {six.__version__}")
    assert six.PY3

"""A real behaviour change between releases: attrs grew its `attrs` namespace in 21.3.0."""

import importlib.util

import pytest


@pytest.mark.operation("attrs-namespace")
def test_attrs_namespace_exists():
    assert importlib.util.find_spec("attrs") is not None, "this attrs has no 'attrs' namespace"

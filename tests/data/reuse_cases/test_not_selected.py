"""Not in the matrix's cases: changing it changes nothing a cell runs."""


def test_not_selected():
    raise AssertionError("never selected by reuse_matrix.yaml")

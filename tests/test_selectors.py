"""Axes chosen from the package index: selectors, their errors, and the real index."""

from __future__ import annotations

import os

import pytest
from packaging.version import Version

from ftmatrix.config import ConfigError, parse_matrix
from ftmatrix.version_selectors import resolve_selectors, select_versions

RELEASED = [
    Version(v)
    for v in (
        "0.18.0",
        "0.18.1",
        "0.18.2",
        "0.19.0",
        "0.19.1",
        "1.0.0rc1",
        "1.0.0",
        "1.1.0",
        "1.1.1",
        "2.13.0+cpu",
        "2.13.0",
    )
]


def parse(text: str):
    return parse_matrix(text, source="m.yaml", default_python="3.11")


def picked(text: str) -> dict[str, tuple]:
    matrix = resolve_selectors(parse(text), lambda package: RELEASED)
    return {axis.package: axis.versions for axis in matrix.packages}


def test_latest_latest_minor_range_and_none():
    assert picked("packages: {trl: {latest: 3}}") == {"trl": ("1.1.0", "1.1.1", "2.13.0")}
    assert picked("packages: {trl: {latest-minor: 3}}") == {"trl": ("1.0.0", "1.1.1", "2.13.0")}
    assert picked("packages: {trl: {range: '>=0.18,<1', latest-minor: 2}}") == {
        "trl": ("0.18.2", "0.19.1")
    }
    assert picked("packages: {trl: {range: '>=0.19,<1', none: true}}") == {
        "trl": (None, "0.19.0", "0.19.1")
    }


def test_prereleases_only_on_request():
    assert select_versions(
        parse("packages: {t: {range: '>=1.0.0rc1,<1.1', prereleases: true}}").packages[0].selector,
        RELEASED,
    ) == ["1.0.0rc1", "1.0.0"]
    assert picked("packages: {t: {range: '>=1.0.0rc1,<1.1'}}") == {"t": ("1.0.0",)}


def test_a_local_build_counts_as_its_release():
    assert picked("packages: {torch: {range: '>=2', latest: 1}}") == {"torch": ("2.13.0",)}


def test_bad_selectors_are_reported_with_their_key_paths():
    with pytest.raises(ConfigError) as caught:
        parse("packages:\n  trl: {lastest: 3}\n  peft: {latest: 0, range: '=>1'}\n")
    assert caught.value.problems == (
        "m.yaml: packages.trl.lastest: unknown key; allowed: latest, latest-minor, range, "
        "prereleases, none. Perhaps you meant 'latest'?",
        "m.yaml: packages.trl: a selector needs latest, latest-minor or range, e.g. {latest: 3}",
        "m.yaml: packages.peft.latest: must be a whole number >= 1, got 0",
        "m.yaml: packages.peft.range: '=>1' is not a specifier such as '>=0.14,<1.0'",
    )


def test_a_selector_that_matches_no_release_is_an_error():
    with pytest.raises(ConfigError) as caught:
        resolve_selectors(parse("packages: {trl: {range: '>=9'}}"), lambda package: RELEASED)
    assert caught.value.problems == (
        "m.yaml: packages.trl: {range: '>=9'} matched no release on the index",
    )


@pytest.mark.slow
def test_selectors_against_the_real_index_frozen_in_time():
    from ftmatrix.pipeline import index_releases

    matrix = parse("packages:\n  six: {latest: 2}\n  trl: {latest-minor: 2, range: '<1'}\n")
    releases = index_releases(matrix, {**os.environ, "UV_EXCLUDE_NEWER": "2025-06-01T00:00:00Z"})
    resolved = resolve_selectors(matrix, releases)
    assert {a.package: a.versions for a in resolved.packages} == {
        "six": ("1.16.0", "1.17.0"),
        "trl": ("0.17.0", "0.18.1"),
    }


def test_an_explicit_version_never_released_names_its_neighbours():
    from ftmatrix.version_selectors import check_released

    matrix = parse("packages:\n  trl: ['0.19.1', '0.99.0']\n  torch: ['2.13.0']\n")
    with pytest.raises(ConfigError) as caught:
        check_released(matrix, lambda package: RELEASED)
    assert caught.value.problems == (
        "m.yaml: packages.trl[1]: '0.99.0' was never released; "
        "closest released: 0.19.0, 0.19.1, 1.0.0",
    )

"""matrix.yaml's JSON Schema (docs/matrix.schema.json) against the loader: what one refuses,
the other refuses; every matrix file of the repository is valid for it."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from ftmatrix.config import ConfigError, parse_matrix
from ftmatrix.matrix_schema import matrix_json_schema

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
VALIDATOR = jsonschema.Draft7Validator(matrix_json_schema())


def test_the_schema_is_a_valid_draft_7_schema():
    jsonschema.Draft7Validator.check_schema(matrix_json_schema())


VALID_FILES = [
    ROOT / "matrix.yaml",
    *sorted(ROOT.glob("ci/gpu-host/*.yaml")),
    *sorted(DATA.glob("*.yaml")),
]


@pytest.mark.parametrize("path", VALID_FILES, ids=lambda p: p.name)
def test_the_repositorys_matrix_files_are_valid_for_the_schema(path: Path):
    assert [e.message for e in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))] == []


# Files and parts of files the loader refuses: the schema refuses each one too.
INVALID = {
    "unknown key": "packages: {six: ['1.17.0']}\nstratgy: full",
    "no packages": "strategy: full",
    "a version read as a number": "packages: {six: [1.10]}",
    "an empty axis": "packages: {six: []}",
    "a package name": "packages: {'-six': ['1.17.0']}",
    "a selector without a count": "packages: {six: {prereleases: true}}",
    "a selector's unknown key": "packages: {six: {newest: 2}}",
    "latest 0": "packages: {six: {latest: 0}}",
    "python as a number": "packages: {six: ['1.17.0']}\npython: 3.11",
    "a strategy": "packages: {six: ['1.17.0']}\nstrategy: random",
    "an empty rule": "packages: {six: ['1.17.0']}\nexclude: [{}]",
    "a timeout of 0": "packages: {six: ['1.17.0']}\ntimeouts: {case: 0}",
    "workers 0": "packages: {six: ['1.17.0']}\nlimits: {workers: 0}",
    "workers past the most": "packages: {six: ['1.17.0']}\nlimits: {workers: 257}",
    "an index url": "packages: {six: ['1.17.0']}\ninstall: {index-url: 3}",
    "a system package": "packages: {six: ['1.17.0']}\ninstall: {system-packages: ['a/b']}",
    "negative gpus": "packages: {six: ['1.17.0']}\nhardware: {l4: {gpus: -1}}",
    "a hardware key": "packages: {six: ['1.17.0']}\nhardware: {l4: {gpu: 1}}",
    "a budget": "packages: {six: ['1.17.0']}\nbisect: {budget: -1}",
    "days": "packages: {six: ['1.17.0']}\nreuse: {max-age-days: 1.5}",
    "probe-caps": "packages: {six: ['1.17.0']}\nprobe-caps: 'yes'",
    "a profile's key": "packages: {six: ['1.17.0']}\nprofiles: {p: {profiles: {}}}",
    "a hardware class's name": "packages: {six: ['1.17.0']}\nhardware: {'a,b': {}}",
    "a profile's name": "packages: {six: ['1.17.0']}\nprofiles: {'a b': {}}",
    "a default profile": "packages: {six: ['1.17.0']}\nprofiles: {a: {}}\ndefault-profile: [a]",
    "python twice": "packages: {six: ['1.17.0']}\npython: ['3.11', '3.11']",
    "python 3.100": "packages: {six: ['1.17.0']}\npython: ['3.100']",
}
VALID = {
    "workers auto": "packages: {six: ['1.17.0']}\nlimits: {workers: auto}",
    "not installed": "packages: {six: [none, '1.17.0']}\nexclude: [{six: null}]",
    "a class with no settings": "packages: {six: ['1.17.0']}\nhardware: {cpu: null}",
    "every host package": "packages: {six: ['1.17.0']}\ninstall: {system-packages: true}",
    "a selector": "packages: {six: {latest: 2, none: true}}",
    "a profile": "packages: {six: ['1.17.0']}\nprofiles: {p: {packages: {six: {latest: 1}}}}",
}


@pytest.mark.parametrize("text", INVALID.values(), ids=INVALID)
def test_the_schema_refuses_what_the_loader_refuses(text: str):
    with pytest.raises(ConfigError):
        parse_matrix(text, source="matrix.yaml", default_python="3.11")
    assert list(VALIDATOR.iter_errors(yaml.safe_load(text)))


@pytest.mark.parametrize("text", VALID.values(), ids=VALID)
def test_the_schema_accepts_what_the_loader_accepts(text: str):
    parse_matrix(text, source="matrix.yaml", default_python="3.11")
    assert [e.message for e in VALIDATOR.iter_errors(yaml.safe_load(text))] == []

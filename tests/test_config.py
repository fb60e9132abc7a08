"""matrix.yaml validation: what is accepted, and the exact message for what is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ftmatrix.config import ConfigError, load_matrix, parse_matrix
from ftmatrix.errors import ExitCode

DATA = Path(__file__).parent / "data"


def parse(text: str, profile: str | None = None):
    return parse_matrix(text, source="m.yaml", profile=profile, default_python="3.11")


def test_simplest_file_has_only_packages():
    matrix = parse("packages:\n  trl: ['0.19.1', none]\n")
    assert [(a.package, a.versions) for a in matrix.packages] == [("trl", ("0.19.1", None))]
    assert matrix.python == ("3.11",)
    assert matrix.strategy == "full"
    assert [h.name for h in matrix.hardware] == ["cpu"]


def test_the_repository_default_matrix_is_valid():
    matrix = load_matrix(Path(__file__).parent.parent / "matrix.yaml", default_python="3.11")
    names = [a.package for a in matrix.packages]
    assert names[:4] == ["torch", "transformers", "trl", "peft"]


def test_profile_overrides_one_axis_and_keeps_the_others():
    text = """
packages:
  transformers: ['4.57.6']
  trl: ['0.19.1']
strategy: full
profiles:
  wide: {strategy: pairwise, packages: {trl: ['0.19.1', '1.16.0']}}
"""
    matrix = parse(text, profile="wide")
    assert matrix.profile == "wide"
    assert matrix.strategy == "pairwise"
    assert {a.package: a.versions for a in matrix.packages} == {
        "transformers": ("4.57.6",),
        "trl": ("0.19.1", "1.16.0"),
    }


def test_default_profile_applies_unless_another_is_asked_for():
    text = """
packages: {trl: ['0.19.1']}
profiles: {wide: {strategy: pairwise}}
default-profile: wide
"""
    assert parse(text).strategy == "pairwise"


def _messages(name: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_matrix(DATA / "invalid" / name, default_python="3.11")
    prefix = f"{DATA / 'invalid' / name}"
    return [p.replace(prefix, "F") for p in caught.value.problems]


def test_unknown_keys_suggest_the_closest_name():
    assert _messages("unknown_keys.yaml") == [
        "F: stratgy: unknown key; allowed: packages, python, support, strategy, exclude, "
        "include, cases, timeouts, limits, install, hardware, bisect, reuse, probe-caps, profiles, "
        "default-profile. "
        "Perhaps you meant 'strategy'?",
        "F: install.find-link: unknown key; allowed: find-links, index-url, extra-index-urls, "
        "system-packages. Perhaps you meant 'find-links'?",
    ]


def test_bad_versions_are_all_reported_with_their_key_paths():
    assert _messages("bad_versions.yaml") == [
        "F: packages.transformers[1]: 'not-a-version' is not a valid version (PEP 440), nor 'none'",
        "F: packages.transformers[2]: 4.5 was read as a number; quote versions, e.g. '4.5'",
        "F: packages.trl: empty axis: list at least one version (or 'none')",
        "F: packages.peft: must be a list of versions such as ['1.2.0', none], got '0.17.1'",
    ]


def test_bad_rules_strategy_timeouts_and_hardware():
    assert _messages("bad_rules.yaml") == [
        "F: strategy: 'random' is not a strategy; allowed: full, pairwise",
        "F: hardware.l4.gpus: must be a whole number from 0 to 64 (GPUs of one machine), got 'two'",
        "F: exclude[0].trl: '=>0.19' is neither a version, a wildcard like '0.19.*' "
        "nor a specifier like '>=0.19,<1'",
        "F: exclude[1].tansformers: unknown key; allowed: trl, python, hardware.",
        "F: timeouts.case: must be a number of seconds from 1 to 2,592,000 (30 days), got -1",
    ]


def test_yaml_syntax_error_names_the_line():
    assert _messages("syntax.yaml") == [
        "F:3:1: invalid YAML: expected ',' or ']', but got '<scalar>'"
    ]


def test_missing_packages():
    assert _messages("no_packages.yaml") == [
        "F: packages: missing; the simplest matrix is 'packages: {name: [version]}'"
    ]


def test_unknown_profile_lists_the_available_ones():
    assert _messages("unknown_profile.yaml") == [
        "F: default-profile: no profile named 'nigthly'; available: nightly"
    ]


def test_requested_profile_that_does_not_exist():
    with pytest.raises(ConfigError) as caught:
        parse("packages: {trl: ['1.0.0']}\n", profile="nightly")
    assert caught.value.problems == (
        "m.yaml: profile: no profile named 'nightly'; available: none are defined",
    )


def test_missing_file():
    with pytest.raises(ConfigError, match="no such file"):
        load_matrix(DATA / "absent.yaml", default_python="3.11")


def test_error_text_counts_the_problems():
    with pytest.raises(ConfigError) as caught:
        parse("packages: {trl: []}\nstrategy: x\n")
    assert str(caught.value).splitlines()[0] == "2 problems in the matrix configuration:"


def test_bisect_budget_defaults_to_off_and_a_profile_can_set_it():
    assert parse("packages: {trl: ['1.16.0']}\n").bisect.budget == 0
    text = "packages: {trl: ['1.16.0']}\nbisect: {budget: 2}\nprofiles: {nightly: {bisect: {budget: 8}}}\n"
    assert parse(text).bisect.budget == 2
    assert parse(text, profile="nightly").bisect.budget == 8


def test_bad_bisect_settings_name_the_key_the_value_and_what_is_allowed():
    def problems(bisect: str) -> tuple[str, ...]:
        with pytest.raises(ConfigError) as caught:
            parse(f"packages: {{trl: ['1.16.0']}}\nbisect: {bisect}\n")
        return caught.value.problems

    assert problems("{budjet: 8}") == (
        "m.yaml: bisect.budjet: unknown key; allowed: budget. Perhaps you meant 'budget'?",
    )
    assert problems("{budget: eight}") == (
        "m.yaml: bisect.budget: must be a whole number of cells >= 0 (0: off), got 'eight'",
    )
    assert problems("{budget: -1}") == (
        "m.yaml: bisect.budget: must be a whole number of cells >= 0 (0: off), got -1",
    )
    assert problems("{budget: true}") == (
        "m.yaml: bisect.budget: must be a whole number of cells >= 0 (0: off), got True",
    )
    assert problems("8") == ("m.yaml: bisect: must be a mapping such as {budget: 8}, got 8",)
    with pytest.raises(ConfigError) as caught:
        parse("packages: {trl: ['1.16.0']}\nprofiles: {nightly: {bisekt: {budget: 8}}}\n")
    assert caught.value.problems[0].endswith("Perhaps you meant 'bisect'?")


def test_probe_caps_is_off_by_default_and_a_boolean():
    assert parse("packages: {trl: ['1.16.0']}\n").probe_caps is False
    assert parse("packages: {trl: ['1.16.0']}\nprobe-caps: true\n").probe_caps is True
    with pytest.raises(ConfigError) as caught:
        parse("packages: {trl: ['1.16.0']}\nprobe-caps: sometimes\n")
    assert caught.value.problems[-1].endswith("probe-caps: must be true or false, got 'sometimes'")


HOSTILE_SUPPORT = [
    "--index-url=http://127.0.0.1:9/simple",
    "-e evil",
    "./evil",
    "../evil",
    "evil @ file:///tmp/evil",
    "six @ https://example.invalid/six.whl",
]


@pytest.mark.parametrize("entry", HOSTILE_SUPPORT)
def test_a_support_entry_that_is_not_a_plain_requirement_is_refused_before_anything_runs(
    tmp_path: Path, entry: str
) -> None:
    """Once, `plan` handed such entries to uv: an option switched its index, and a local
    folder named there was built, its setup.py run, at plan time."""
    (tmp_path / "evil").mkdir()
    marker = tmp_path / "setup-py-ran"
    (tmp_path / "evil" / "setup.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nfrom setuptools import setup\nsetup(name='evil')\n"
    )
    (tmp_path / "matrix.yaml").write_text(
        "packages:\n  six: ['1.17.0']\nsupport: " + json.dumps([entry]) + "\n"
    )
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "plan"],
        env={**os.environ, "FTMATRIX_MATRIX": str(tmp_path / "matrix.yaml")},
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == ExitCode.CONFIG, ran.stdout + ran.stderr
    assert f"support[0]: {entry!r} is not a PEP 508 requirement" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert not marker.exists()


@pytest.mark.parametrize("name", ["six; touch x", "../../etc/passwd", "a/b", "-x", "six "])
def test_an_axis_that_is_not_a_distribution_name_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump({"packages": {name: ["1.0"]}}))
    with pytest.raises(ConfigError) as caught:
        load_matrix(path, profile=None, default_python="3.11")
    assert caught.value.problems == (
        f"{path}: packages.{name}: {name!r} is not a distribution name (letters, digits, "
        "'.', '_' and '-', starting and ending with a letter or digit), such as 'transformers'",
    )


def test_plain_requirements_with_extras_specifiers_and_markers_pass(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    support = [
        "accelerate",
        "datasets>=3",
        "torch[opt]==2.13.0",
        'bnb; platform_machine == "x86_64"',
    ]
    path.write_text(yaml.safe_dump({"packages": {"six": ["1.17.0"]}, "support": support}))
    assert load_matrix(path, profile=None, default_python="3.11").support == tuple(support)


@pytest.mark.parametrize(
    ("gpu_name", "gpus", "problem"),
    [
        (["H100"], 1, "must be a pattern of GPU names such as 'H100|H200', got ['H100']"),
        ("H100(", 1, "is not a regular expression"),
        ("H100", 0, "names the GPUs of a class with gpus: 0; give gpus: 1 or more"),
    ],
)
def test_a_bad_gpu_name_names_its_key(tmp_path: Path, gpu_name: object, gpus: int, problem: str):
    path = tmp_path / "matrix.yaml"
    hardware = {"h100": {"gpus": gpus, "gpu-name": gpu_name}}
    path.write_text(yaml.safe_dump({"packages": {"trl": ["1.0"]}, "hardware": hardware}))
    with pytest.raises(ConfigError) as caught:
        load_matrix(path, default_python="3.11")
    assert any(f"hardware.h100.gpu-name: {problem}" in p for p in caught.value.problems)


def test_a_gpu_name_is_kept() -> None:
    matrix = load_matrix(DATA / "gpu_named.yaml", default_python="3.11")
    assert [(h.name, h.gpus, h.gpu_name) for h in matrix.hardware] == [("hopper", 1, "H100|H200")]


def test_a_bad_gpus_count_is_said_once_not_again_under_gpu_name(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    hardware = {"h100": {"gpus": -1, "gpu-name": "H100"}}
    path.write_text(yaml.safe_dump({"packages": {"trl": ["1.0"]}, "hardware": hardware}))
    with pytest.raises(ConfigError) as caught:
        load_matrix(path, default_python="3.11")
    assert [p for p in caught.value.problems if "hardware.h100" in p] == [
        f"{path}: hardware.h100.gpus: must be a whole number from 0 to 64 (GPUs of one machine), got -1"
    ]

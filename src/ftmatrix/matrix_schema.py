"""matrix.yaml as a JSON Schema: completion and checking as you type in an editor, and the
docs' table of keys.

Built from config's own key lists and defaults, so a key config reads and this schema
does not describe is an error here, not a silent gap. The schema holds the file's shape
(keys, types, ranges, choices); what needs packaging or the index (a PEP 440 version, a
specifier, a requirement, a profile that exists, a version that was released) config
checks when the file is read, with the key path of each problem.

``python -m ftmatrix.matrix_schema`` prints it (docs/matrix.schema.json is this output,
kept current by ``python -m ftmatrix.docs_gen``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ftmatrix.config import (
    BISECT_KEYS,
    DEFAULT_HARDWARE,
    DISTRIBUTION_NAME,
    HARDWARE_KEYS,
    INSTALL_KEYS,
    LIMIT_KEYS,
    MAX_WORKERS,
    PROFILE_KEYS,
    REUSE_KEYS,
    SELECTOR_KEYS,
    STRATEGIES,
    TIMEOUT_KEYS,
    TOP_LEVEL_KEYS,
    BisectOptions,
    Limits,
    ReuseOptions,
    Timeouts,
)
from ftmatrix.config_machine import (
    MAX_GPUS,
    MAX_MEMORY_GIB,
    MAX_TIMEOUT,
    MIN_MEMORY_GIB,
    MIN_TIMEOUT,
)
from ftmatrix.matrix_model import PLAIN_NAME

DRAFT = "http://json-schema.org/draft-07/schema#"  # the draft editors' YAML servers all read

Schema = dict[str, Any]


def _strict_object(keys: Sequence[str], properties: Mapping[str, Schema], **more: Any) -> Schema:
    """A mapping of exactly ``keys`` (config's list for this section), each described."""
    if list(properties) != list(keys):
        raise AssertionError(f"schema keys {list(properties)} are not config's {list(keys)}")
    return {"type": "object", "additionalProperties": False, "properties": dict(properties)} | more


def _list_of(item: Schema, description: str, **more: Any) -> Schema:
    return {"type": "array", "items": item, "description": description} | more


NAME = {"type": "string", "minLength": 1}
# A hardware class's or a profile's name: it reaches cell labels and session names.
PLAIN = {"type": "string", "pattern": f"^{PLAIN_NAME.pattern}$"}
# versions.PYTHON_VERSION's shape (the loader also says 3.9 or newer)
PYTHON = {"type": "string", "pattern": r"^3\.\d{1,2}(\.\d{1,2})?$"}
VERSION = {
    "title": "version",
    "type": ["string", "integer", "null"],
    "description": "A release (PEP 440; quote it: YAML reads 2.10 as the number 2.1), or "
    "none: the package is not installed.",
}
SELECTOR = _strict_object(
    SELECTOR_KEYS,
    {
        "latest": {"type": "integer", "minimum": 1, "description": "The newest N releases."},
        "latest-minor": {
            "type": "integer",
            "minimum": 1,
            "description": "The newest patch release of each of the newest N minor series.",
        },
        "range": {
            "type": "string",
            "description": "Only releases inside this specifier, such as '>=0.17,<0.19'.",
        },
        "prereleases": {
            "type": "boolean",
            "default": False,
            "description": "Pre-releases count too.",
        },
        "none": {
            "type": "boolean",
            "default": False,
            "description": "Also a cell without the package.",
        },
    },
    anyOf=[{"required": ["latest"]}, {"required": ["latest-minor"]}, {"required": ["range"]}],
    title="selector",
    description="Versions chosen from the package index when the plan is made.",
)


def _sections() -> dict[str, Schema]:
    """Every key a profile may override (all but profiles and default-profile)."""
    rule = {
        "title": "rule",
        "type": "object",
        "minProperties": 1,
        "additionalProperties": {"type": ["string", "integer", "null"]},
        "description": "Package (or python, hardware) -> a version, a wildcard such as "
        "'0.19.*' or a specifier such as '>=0.19,<1'.",
    }
    sections: dict[str, Schema] = {
        "packages": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": f"^{DISTRIBUTION_NAME.pattern}$"},
            "additionalProperties": {
                "anyOf": [
                    _list_of(VERSION, "The versions the axis takes.", minItems=1, uniqueItems=True),
                    SELECTOR,
                ],
                "description": "One axis: its versions, or a selector.",
            },
            "description": "The axes: package -> its versions (none: not installed), or a "
            "selector resolved against the index at plan time.",
        },
        "python": {
            "anyOf": [PYTHON, _list_of(PYTHON, "Python versions.", minItems=1, uniqueItems=True)],
            "description": "The cells' Python versions, 3.9 or newer, such as '3.11' or "
            "'3.12.4', each once (default: the Python running ftmatrix).",
        },
        "support": _list_of(
            NAME,
            "Packages installed in every cell at what the resolver picks, and recorded: PEP "
            "508 requirements such as 'accelerate' or 'datasets>=3'.",
            default=[],
        ),
        "strategy": {
            "enum": list(STRATEGIES),
            "default": STRATEGIES[0],
            "description": "full: every combination; pairwise: every pair of values that can "
            "co-install appears in a cell that installs.",
        },
        "exclude": _list_of(
            rule, "Combinations left out; a rule matches a cell when every key does.", default=[]
        ),
        "include": _list_of(
            rule, "Combinations added back after the strategy and the excludes.", default=[]
        ),
        "cases": _list_of(
            NAME, "Case ids under the cases folder (default: all of them).", default=[]
        ),
        "timeouts": _strict_object(
            TIMEOUT_KEYS,
            {
                "case": {
                    "type": "number",
                    "minimum": MIN_TIMEOUT,
                    "maximum": MAX_TIMEOUT,
                    "default": Timeouts().case,
                    "description": "Seconds a case may run; past it, it is killed: timeout "
                    f"(at least {MIN_TIMEOUT}, at most 30 days).",
                },
                "cell": {
                    "type": "number",
                    "minimum": MIN_TIMEOUT,
                    "maximum": MAX_TIMEOUT,
                    "default": Timeouts().cell,
                    "description": f"Seconds a whole cell may run (at least {MIN_TIMEOUT}, at "
                    "most 30 days).",
                },
            },
            description="Time limits, in seconds.",
        ),
        "limits": _strict_object(
            LIMIT_KEYS,
            {
                "memory-gib": {
                    "type": ["number", "null"],
                    "minimum": MIN_MEMORY_GIB,
                    "maximum": MAX_MEMORY_GIB,
                    "default": Limits().memory_gib,
                    "description": "GiB a case may use; past it, it is killed: oom (default: "
                    "90% of the machine's memory, split among the cells at once; at least "
                    f"{MIN_MEMORY_GIB} (64 MiB, about what a Python running pytest needs), at "
                    "most 1 PiB).",
                },
                "workers": {
                    "anyOf": [
                        {"type": "integer", "minimum": 1, "maximum": MAX_WORKERS},
                        {"const": "auto"},
                    ],
                    "default": Limits().workers,
                    "description": "pytest-xdist workers sharing a cell's cases; auto: one "
                    "per CPU.",
                },
                "cells": {
                    "anyOf": [
                        {"type": "integer", "minimum": 1, "maximum": MAX_WORKERS},
                        {"const": "auto"},
                    ],
                    "default": Limits().cells,
                    "description": "Cells run side by side (nox's parallel sessions); auto: "
                    "one per CPU, at most the cells selected, one where cells lease GPUs.",
                },
            },
            description="What a cell's cases may use.",
        ),
        "install": _strict_object(
            INSTALL_KEYS,
            {
                "find-links": {
                    "type": ["array", "null"],
                    "items": {"type": "string"},
                    "default": [],
                    "description": "Folders or URLs of wheels (a wheelhouse), as uv's "
                    "--find-links.",
                },
                "index-url": {
                    "type": ["string", "null"],
                    "default": None,
                    "description": "The package index in place of PyPI.",
                },
                "extra-index-urls": {
                    "type": ["array", "null"],
                    "items": {"type": "string"},
                    "default": [],
                    "description": "More package indexes.",
                },
                "system-packages": {
                    "anyOf": [
                        {"type": ["boolean", "null"]},
                        {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string", "pattern": r"^[A-Za-z0-9*?\[\]._-]+$"},
                        },
                    ],
                    "default": False,
                    "description": "The host interpreter's packages each cell takes as "
                    "installed: names or globs such as [torch, 'nvidia-*'], or true for all.",
                },
            },
            description="Where packages come from, beyond uv's own settings and UV_* variables.",
        ),
        "hardware": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": PLAIN,
            "additionalProperties": _strict_object(
                HARDWARE_KEYS,
                {
                    "runs-on": {
                        "anyOf": [{"type": "string"}, {"type": "array", "items": NAME}],
                        "description": "The runner labels of this class's CI jobs.",
                    },
                    "gpus": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_GPUS,
                        "default": 0,
                        "description": f"GPUs each cell of this class leases (at most {MAX_GPUS}).",
                    },
                    "gpu-name": {
                        "type": "string",
                        "minLength": 1,
                        "description": "A pattern (regular expression, any case) the GPUs' "
                        "names must match, such as 'H100': a machine whose GPUs do not match "
                        "records the class's cells skip.",
                    },
                },
                description="A kind of machine.",
            )
            | {"type": ["object", "null"]},
            "default": DEFAULT_HARDWARE,
            "description": "Hardware classes: name -> the runners that reach it and its GPUs; a "
            "name is letters, digits, '.', '_' and '-' (it begins each cell's label).",
        },
        "bisect": _strict_object(
            BISECT_KEYS,
            {
                "budget": {
                    "type": "integer",
                    "minimum": 0,
                    "default": BisectOptions().budget,
                    "description": "Cells autobisect may build after a run; 0: off.",
                }
            },
            description="Automatic bisection of new failures.",
        ),
        "reuse": _strict_object(
            REUSE_KEYS,
            {
                "max-age-days": {
                    "type": "integer",
                    "minimum": 0,
                    "default": ReuseOptions().max_age_days,
                    "description": "Reuse a cell's results while its lock, cases and hardware "
                    "are unchanged, for at most N days; 0: off.",
                }
            },
            description="Nightly cost proportional to change.",
        ),
        "probe-caps": {
            "type": "boolean",
            "default": False,
            "description": "Cells blocked only by a declared upper bound also run past it, "
            "as probes.",
        },
    }
    if list(sections) != list(PROFILE_KEYS):
        raise AssertionError(f"schema sections {list(sections)} are not config's {PROFILE_KEYS}")
    return sections


def matrix_json_schema() -> Schema:
    """The JSON Schema (draft 7) of a matrix file."""
    sections = _sections()
    refs = {key: {"$ref": f"#/definitions/{key}"} for key in sections}
    profile = {
        "type": "object",
        "additionalProperties": False,
        "properties": refs,
        "description": "Overrides of any key above; mappings merge one level deep.",
    }
    properties = refs | {
        "profiles": {
            "type": "object",
            "propertyNames": PLAIN,
            "additionalProperties": profile,
            "default": {},
            "description": "Named sets of overrides, chosen by FTMATRIX_PROFILE or --profile; a "
            "name is letters, digits, '.', '_' and '-'.",
        },
        "default-profile": {
            "anyOf": [PLAIN, {"type": "null"}],
            "default": None,
            "description": "The profile applied when none is chosen.",
        },
    }
    if set(properties) != set(TOP_LEVEL_KEYS):
        raise AssertionError(f"schema keys {list(properties)} are not config's {TOP_LEVEL_KEYS}")
    return {
        "$schema": DRAFT,
        "title": "ftmatrix matrix.yaml",
        "description": "A compatibility matrix: the axes, how cells are chosen, where they "
        "install from and run. The simplest valid file has only packages.",
        "type": "object",
        "required": ["packages"],
        "additionalProperties": False,
        "properties": {key: properties[key] for key in TOP_LEVEL_KEYS},
        "definitions": sections,
    }


def matrix_json_schema_text() -> str:
    """The schema as the published file holds it."""
    return json.dumps(matrix_json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(matrix_json_schema_text(), end="")

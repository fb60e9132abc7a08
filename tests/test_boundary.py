"""ftmatrix.cell runs inside each cell's venv: it imports only stdlib, pytest and packaging.

A cell's venv holds the frameworks under test and ftmatrix itself, but not ftmatrix's own
dependencies (nox, uv, pyyaml): an import of one of them, or of an outside-cell ftmatrix
module that pulls them in, would break every cell at collection.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import ftmatrix.cell

CELL = Path(ftmatrix.cell.__file__).parent
ALLOWED_THIRD_PARTY = {"pytest", "_pytest", "packaging"}
# The frameworks under test that the hardware probe looks at where a cell has them: only
# inside a try, so that a cell without them (or with a broken install) records that instead.
PROBED = {"torch"}


def foreign_imports(source: str) -> list[str]:
    """The modules ``source`` imports that a cell's venv may lack (every import, nested too)."""
    tree = ast.parse(source)
    guarded = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Try)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside ftmatrix.cell itself
                continue
            names = [node.module or ""]
        else:
            continue
        probed = id(node) in guarded and all(
            name.split(".", maxsplit=1)[0] in PROBED for name in names
        )
        found.extend(name for name in names if not (_allowed(name) or probed))
    return found


def _allowed(name: str) -> bool:
    top = name.split(".", maxsplit=1)[0]
    return (
        top in sys.stdlib_module_names
        or top in ALLOWED_THIRD_PARTY
        or name == "ftmatrix.cell"
        or name.startswith("ftmatrix.cell.")
    )


def test_the_cell_package_has_its_modules():
    names = {path.stem for path in CELL.glob("*.py")}
    assert {
        "plugin",
        "records",
        "signature",
        "hardware",
        "status",
        "gpu_lease",
        "processes",
    } <= names


@pytest.mark.parametrize("path", sorted(CELL.glob("*.py")), ids=lambda path: path.name)
def test_a_cell_module_imports_only_stdlib_pytest_and_packaging(path: Path):
    assert foreign_imports(path.read_text()) == []


@pytest.mark.parametrize(
    "source",
    [
        "import yaml",
        "from nox import session",
        "from ftmatrix.config import load_config",
        "import ftmatrix.runner",
        "def f():\n    from ftmatrix import store\n",
        "import torch",  # a probed framework, but unguarded
        "try:\n    import yaml\nexcept ImportError:\n    pass\n",  # guarded, but not probed
    ],
)
def test_the_check_catches_an_import_from_outside(source: str):
    assert foreign_imports(source) != []


def test_the_check_lets_the_allowed_through():
    source = (
        "from __future__ import annotations\nimport json, os.path\nimport pytest\n"
        "from _pytest.nodes import Item\nfrom packaging.version import Version\n"
        "from ftmatrix.cell.status import Status\nfrom . import records\n"
        "try:\n    import torch\nexcept Exception:\n    torch = None\n"
    )
    assert foreign_imports(source) == []

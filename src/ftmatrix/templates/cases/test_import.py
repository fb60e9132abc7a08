"""Each package of the matrix imports cleanly beside the others: the most common break of all.

``ftmatrix init`` wrote DISTRIBUTIONS from the packages it was given; add yours. A
distribution a cell does not install (an axis at 'none') is n/a there, not a failure.
"""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest

DISTRIBUTIONS: list[str] = []  # ftmatrix init fills this in


def top_level_modules(distribution: str) -> list[str]:
    """The module named as the distribution where it installs one, else all its public ones.

    (torch also installs torchgen, a build tool that needs packages torch does not.)
    """
    found = importlib.metadata.distribution(distribution)
    listed = found.read_text("top_level.txt")
    if listed:
        names = set(listed.split())
    else:
        names = {
            path.parts[0] if len(path.parts) > 1 else path.stem
            for path in found.files or ()
            if (len(path.parts) == 2 and path.name == "__init__.py")
            or (len(path.parts) == 1 and path.suffix == ".py")
        }
    own = distribution.lower().replace("-", "_").replace(".", "_")
    if own in names:
        return [own]
    return sorted(n for n in names if n.isidentifier() and not n.startswith("_"))


@pytest.mark.operation("import")
@pytest.mark.parametrize(
    "distribution",
    [pytest.param(d, marks=pytest.mark.requires_packages(**{d: ">=0"})) for d in DISTRIBUTIONS],
)
def test_imports(distribution: str) -> None:
    modules = top_level_modules(distribution)
    assert modules, f"{distribution} installs no module to import"
    for name in modules:
        importlib.import_module(name)

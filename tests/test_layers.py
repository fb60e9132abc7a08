"""The entry points stay thin: the CLI and the nox sessions are two doors to one pipeline.

``cli.py`` is argument parsing and one short handler per subcommand over the pipeline
(ARCHITECTURE.md); it never reaches into a cell's run. The sessions wire nox to the
pipeline and run the chores through ``python -m ftmatrix``; they never import the CLI.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import ftmatrix

PACKAGE = Path(__file__).parent.parent / "src" / "ftmatrix"
DATA = Path(__file__).parent / "data"


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or nested (``from a import b``: a and a.b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def of(modules: set[str], module: str) -> set[str]:
    return {m for m in modules if m == module or m.startswith(f"{module}.")}


def test_imported_sees_every_form():
    source = PACKAGE.parent.parent / "tests" / "test_layers.py"
    assert {"ast", "pathlib", "pathlib.Path", "__future__.annotations"} <= imported(source)


def test_the_cli_imports_nothing_from_the_runner():
    assert of(imported(PACKAGE / "cli.py"), "ftmatrix.runner") == set()


def test_the_sessions_import_the_pipeline_never_the_cli():
    modules = imported(PACKAGE / "sessions.py")
    assert of(modules, "ftmatrix.cli") == set()
    assert "ftmatrix.pipeline" in modules


def test_the_cli_stays_parsing_and_short_handlers():
    lines = (PACKAGE / "cli.py").read_text().count("\n")
    assert lines <= 400, f"cli.py has {lines} lines: the work belongs in the pipeline's modules"


def test_a_chore_runs_the_cli_from_the_packages_own_noxfile(tmp_path: Path):
    """`ftmatrix run` in a folder without a noxfile uses the package's; nox runs the chores
    in the package's folder, where no module may shadow the standard library's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMATRIX_")}
    ran = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(Path(ftmatrix.__file__).parent / "_noxfile.py")]
        + ["-s", "report"],
        env={
            **env,
            "FTMATRIX_MATRIX": str(DATA / "small_matrix.yaml"),
            "FTMATRIX_OUT": str(tmp_path / "out"),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"report: {tmp_path / 'out' / 'index.html'} (0 records")


def test_check_loads_neither_the_resolver_nor_the_config():
    """``ftmatrix check`` reads a results file: it needs records and text helpers, not the
    machinery that plans and resolves a matrix (nor that machinery's start-up cost)."""
    probe = "import sys, ftmatrix.check.command; print(' '.join(sorted(sys.modules)))"
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(ran.stdout.split())
    for module in ("ftmatrix.resolve", "ftmatrix.config", "ftmatrix.plan", "ftmatrix.pipeline"):
        assert module not in loaded, f"import ftmatrix.check.command loads {module}"


def test_no_module_is_named_like_a_standard_library_module():
    """A chore runs ``python -m ftmatrix`` in the package's folder (the noxfile ``ftmatrix
    run`` uses), which Python puts first on the path: a module named like one of the
    standard library's would shadow it there."""
    clashing = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*/")]
        if path.stem in sys.stdlib_module_names
        and (path.suffix == ".py" or (path / "__init__.py").is_file())
    )  # modules, and packages (a folder with __init__.py): ftmatrix/bisect/ once shadowed bisect
    assert clashing == []

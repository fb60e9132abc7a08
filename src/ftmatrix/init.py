"""``ftmatrix init``: a compatibility matrix in an existing repository, ready to run.

It writes a matrix.yaml over the packages named (each a selector such as
``{latest: 2}`` or explicit versions), a cases/ folder with the example cases of
each operation family asked for (this repository's own cases and their tiny
offline models, shipped in the package), a noxfile that imports the sessions, and
the nightly workflow that calls the reusable one. What to write is computed first
(pure); nothing is written if any of it exists already, unless ``force``. The
subcommand's arguments and its run are here too (:func:`add_init_parser`, :func:`run_init`).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ftmatrix.config import parse_matrix
from ftmatrix.errors import ConfigError, ExitCode, UsageError
from ftmatrix.install_source import this_install_source
from ftmatrix.path_kinds import check_kinds
from ftmatrix.versions import parse_version, shown

# What every case imports: shared fixtures and the tiny offline models.
EXAMPLE_HELPERS = ("conftest.py", "helpers/__init__.py", "helpers/tiny.py")
# The contract suite's helpers besides (--contracts): release adapters, the contracts and
# their references, knob tables.
HELPERS = (
    *EXAMPLE_HELPERS,
    "helpers/compat.py",
    "helpers/train.py",
    "helpers/contracts.py",
    "helpers/knobs.py",
    "helpers/update.py",
    "helpers/adapters.py",
)
TRAINING = ("torch", "transformers", "trl", "datasets", "accelerate")
# Operation family -> (its example case file, the distributions its cases need).
OPERATIONS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "import": ("test_import.py", ()),
    "sft": ("test_sft.py", TRAINING),
    "lora": ("test_lora.py", ("torch", "transformers", "peft")),
    "dpo": ("test_dpo.py", TRAINING),
    "grpo": ("test_grpo.py", TRAINING),
    "train": ("test_train.py", ("torch", "transformers", "accelerate")),
    "qlora": ("test_qlora.py", ("torch", "transformers", "peft", "bitsandbytes")),
}
DEFAULT_OPERATION = "import"
DEFAULT_SELECTOR = "latest:2"
NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508's distribution name
SELECTOR = re.compile(r"(latest|latest-minor):([1-9][0-9]*)")
PACKAGE_FORMS = "NAME, NAME=latest:N, NAME=latest-minor:N or NAME=V1,V2 (versions or none)"
IMPORT_PLACEHOLDER = "DISTRIBUTIONS: list[str] = []  # ftmatrix init fills this in\n"
NIGHTLY = ".github/workflows/ftmatrix-nightly.yml"
REUSABLE = ".github/workflows/ftmatrix.yml"
# A repository's own noxfile can keep its sessions and gain ours with one line.
EXISTING_HINTS = {"noxfile.py": " (or add `from ftmatrix.sessions import *` to yours)"}


@dataclass(frozen=True, kw_only=True)
class AxisRequest:
    """One package axis of the new matrix: its name and how its versions are chosen."""

    package: str
    selector: tuple[str, int] | None = None  # ("latest", 3) or ("latest-minor", 2)
    versions: tuple[str, ...] = ()  # explicit versions ("none": not installed)

    def yaml(self) -> str:
        """The axis's value as matrix.yaml writes it."""
        if self.selector is not None:
            return f"{{{self.selector[0]}: {self.selector[1]}}}"
        return "[" + ", ".join(v if v == "none" else f'"{v}"' for v in self.versions) + "]"


def parse_package(text: str) -> AxisRequest:
    """``trl``, ``trl=latest:3``, ``trl=latest-minor:2`` or ``peft=0.17.1,0.18.1``."""
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not NAME.fullmatch(name):
        raise UsageError(
            f"init: package {text!r}: {name!r} is not a package name "
            f"(letters, digits, '.', '-', '_'); expected {PACKAGE_FORMS}"
        )
    spec = spec.strip() if sep else DEFAULT_SELECTOR
    chosen = SELECTOR.fullmatch(spec)
    if chosen:
        return AxisRequest(package=name, selector=(chosen.group(1), int(chosen.group(2))))
    versions = tuple(v.strip() for v in spec.split(","))
    seen: dict[Version | None, str] = {}
    for version in versions:
        try:
            key = None if version == "none" else parse_version(version)
        except InvalidVersion:
            raise UsageError(
                f"init: package {shown(text)}: {shown(version)} is neither a version nor a "
                f"selector; expected {PACKAGE_FORMS}"
            ) from None
        if key in seen:
            # plan would refuse the matrix written: one release, two cells of one label
            same = "" if seen[key] == version else f" ({seen[key]!r} is the same, PEP 440)"
            raise UsageError(
                f"init: package {shown(text)}: {version!r} is listed twice{same}; name each "
                "version once"
            )
        seen[key] = version
    return AxisRequest(package=name, versions=versions)


def parse_operations(texts: Iterable[str]) -> tuple[str, ...]:
    """``["sft,lora", "dpo"]`` -> ``("sft", "lora", "dpo")``; an unknown name is a UsageError."""
    chosen: list[str] = []
    for text in texts:
        for name in (n.strip() for n in text.split(",")):
            if name not in OPERATIONS:
                raise UsageError(
                    f"init: --operation {name!r}: no example for it; "
                    f"choose from {', '.join(sorted(OPERATIONS))}"
                )
            if name not in chosen:
                chosen.append(name)
    return tuple(chosen) or (DEFAULT_OPERATION,)


def scaffold(
    axes: Sequence[AxisRequest],
    operations: Sequence[str],
    *,
    ftmatrix: str,
    contracts: bool = False,
) -> dict[str, str]:
    """Every file ``init`` writes, by path relative to the repository, with its text;
    ``ftmatrix``: the requirement the nightly's runners install ftmatrix by.

    The cases are a short readable example per operation (templates/examples/), or with
    ``contracts`` this repository's own contract suite and its helpers.
    """
    names = [canonicalize_name(a.package) for a in axes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"init: package {duplicates[0]!r} is named twice; name each once")
    if not axes:
        raise UsageError(f"init: name at least one package ({PACKAGE_FORMS})")
    needed = {d for op in operations for d in OPERATIONS[op][1]}
    support = sorted(d for d in needed if canonicalize_name(d) not in names)
    out = {"matrix.yaml": matrix_yaml(axes, support)}
    _check_matrix(out["matrix.yaml"])
    for name in HELPERS if contracts else EXAMPLE_HELPERS:
        out[f"cases/{name}"] = shipped(f"cases/{name}")
    for operation in operations:
        case = OPERATIONS[operation][0]
        from_examples = not contracts and operation != "import"
        text = shipped(f"examples/{case}" if from_examples else f"cases/{case}")
        if operation == "import":
            listed = ", ".join(f'"{a.package}"' for a in axes)
            text = text.replace(IMPORT_PLACEHOLDER, f"DISTRIBUTIONS = [{listed}]\n")
        out[f"cases/{case}"] = text
    out["noxfile.py"] = shipped("noxfile.py")
    out[REUSABLE] = shipped("ftmatrix.yml")
    out[NIGHTLY] = nightly_yaml(ftmatrix)
    return out


def _check_matrix(text: str) -> None:
    """The matrix init would write, read as plan reads it: what plan would refuse is this
    command's usage error, before any file is written."""
    try:
        parse_matrix(text, source="matrix.yaml", default_python="3.11")
    except ConfigError as error:
        raise UsageError(
            "init: the arguments make a matrix that plan refuses: " + "; ".join(error.problems)
        ) from None


# Where a template lives in this repository, when it is not in the package folder: the
# wheel force-includes these (pyproject.toml), an editable install sees only the checkout.
IN_REPOSITORY = {"ftmatrix.yml": ".github/workflows/ftmatrix.yml"}


def shipped(name: str) -> str:
    """The text of template ``name`` (``cases/helpers/tiny.py``, ``ftmatrix.yml``): from the
    installed package, else (an editable install) from the repository it was installed from."""
    packaged = files("ftmatrix") / "templates" / name
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parents[2] / IN_REPOSITORY.get(name, name)
    if not checkout.is_file():
        raise UsageError(
            f"init: this ftmatrix installation lacks its template {name}; reinstall it"
        )
    return checkout.read_text(encoding="utf-8")


def matrix_yaml(axes: Sequence[AxisRequest], support: Sequence[str]) -> str:
    """The new matrix.yaml: the axes, what the example cases need, one CPU hardware class."""
    lines = [
        "# This repository's compatibility matrix (written by `ftmatrix init`; ftmatrix's docs",
        "# list every key: Reference, matrix.yaml). `nox -s plan` shows the cells, `ftmatrix run`",
        "# runs them and builds reports/index.html; `nox -s report` rebuilds the report.",
        "",
        "# The axes: package -> versions tried ('none' = not installed); every combination is",
        "# a cell. A selector ({latest: N}, {latest-minor: N}) is resolved against the package",
        "# index when the plan is made; UV_EXCLUDE_NEWER=2026-01-01 freezes what newest means.",
        "packages:",
        *(f"  {a.package}: {a.yaml()}" for a in axes),
        "",
    ]
    if support:
        lines += [
            "# What the example cases need besides the axes, at whatever the resolver picks.",
            f"support: [{', '.join(support)}]",
            "",
        ]
    lines += [
        "strategy: full                    # pairwise: every pair of values, in fewer cells",
        "",
        "timeouts: {case: 600, cell: 3600}  # seconds",
        "",
        "# Where cells run: the nightly runs each class's cells on runners with its labels.",
        "hardware:",
        "  cpu: {runs-on: [ubuntu-latest], gpus: 0}",
        "  # l4: {runs-on: [self-hosted, gpu, l4], gpus: 1}",
        "",
        "# What the nightly (.github/workflows/ftmatrix-nightly.yml) changes: a cell whose lock,",
        "# cases and hardware are unchanged since its newest run is not run again (its records",
        "# are carried forward) for up to 7 nights; the re-runs spread over them.",
        "profiles:",
        "  nightly:",
        "    reuse: {max-age-days: 7}",
    ]
    return "\n".join(lines) + "\n"


def nightly_yaml(requirement: str) -> str:
    """The repository's nightly: the reusable ftmatrix.yml, installing ``requirement``."""
    return f"""\
# The compatibility matrix every night (written by `ftmatrix init`): ftmatrix.yml plans
# matrix.yaml, runs each hardware class's cells on its runners and publishes to Pages.
name: ftmatrix-nightly
on:
  schedule:
    - cron: "17 3 * * *"
  workflow_dispatch:
permissions: {{}}
concurrency:
  group: ftmatrix-nightly
jobs:
  matrix:
    uses: ./{REUSABLE}
    permissions: {{contents: read, pages: write, id-token: write}}
    with:
      ftmatrix: "{requirement}"
      profile: nightly
      python: "3.11"
"""


def write_scaffold(folder: Path, planned: Mapping[str, str], *, force: bool = False) -> list[Path]:
    """Write ``planned`` under ``folder``; refuse (writing nothing) where a file exists."""
    if not folder.is_dir():
        raise UsageError(f"init: --dir {str(folder)!r}: no such folder")
    # Even under --force: a folder is never written over, a FIFO never opened.
    check_kinds(
        (folder / parent, "folder", "a folder init writes into")
        for name in planned
        for parent in Path(name).parents
        if parent != Path()
    )
    check_kinds((folder / name, "file", "a file init writes") for name in planned)
    existing = [name for name in planned if (folder / name).exists()]
    if existing and not force:
        count = len(existing)
        raise UsageError(
            "\n".join(
                [
                    f"init: {count} file{'s' if count != 1 else ''} already exist in {folder}; "
                    "nothing was written (--force overwrites them):",
                    *(f"  - {name}{EXISTING_HINTS.get(name, '')}" for name in existing),
                ]
            )
        )
    written = []
    for name, text in planned.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def add_init_parser(sub: Any) -> None:
    """``ftmatrix init``'s arguments, on the CLI's subparsers."""
    init = sub.add_parser(
        "init",
        help="write a matrix.yaml, example cases, a noxfile and the nightly into a repository",
        description="Scaffold a compatibility matrix in an existing repository: matrix.yaml "
        "over the PACKAGEs, cases/ with an example per --operation, noxfile.py and the "
        "nightly workflow. Writes nothing if any of these files exists (unless --force).",
    )
    init.add_argument(
        "packages",
        nargs="*",
        metavar="PACKAGE",
        help="NAME (the newest 2 releases), NAME=latest:N, NAME=latest-minor:N or NAME=V1,V2",
    )
    init.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OPS",
        help="comma-separated operation families to write example cases for: "
        + ", ".join(
            f"{name} (the default)" if name == DEFAULT_OPERATION else name for name in OPERATIONS
        ),
    )
    init.add_argument(
        "--contracts",
        action="store_true",
        help="write ftmatrix's own contract suite (each case checks the loss, the step, "
        "masks and adapters against an independent computation) instead of the short "
        "readable example of each operation",
    )
    init.add_argument("--dir", default=".", help="the repository (default: this folder)")
    init.add_argument("--force", action="store_true", help="overwrite files that exist")


def run_init(args: argparse.Namespace) -> int:
    """``ftmatrix init``: plan every file first, then write them all or none."""
    source = this_install_source()
    planned = scaffold(
        [parse_package(text) for text in args.packages],
        parse_operations(args.operation),
        ftmatrix=source.requirement,
        contracts=args.contracts,
    )
    folder = Path(args.dir)
    for path in write_scaffold(folder, planned, force=args.force):
        print(f"wrote {path}")
    print(f"the nightly installs ftmatrix as {source.requirement!r} (as this one was installed)")
    if source.note:
        print(f"note: {source.note}")
    print(
        "next: `nox -s plan` shows the cells, `ftmatrix run` runs them and builds "
        "reports/index.html; add reports/ and .nox/ to .gitignore"
    )
    return ExitCode.OK

"""The report page's "Does my stack work?" and ftmatrix check: one algorithm.

The page embeds check's own data (lookup_table of the report's results) and its script
(report/assets/stack.js) takes the steps that need the pasted stack. Here both get the
same inputs, Node runs the script, and the two answers must be the same text: check's
report_text less its "results:" line. The script runs in Node where it is installed, else
in Debian's Chromium (as tests/test_browser.py drives it); skipped where neither is.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import make_record
from packaging.version import Version

from ftmatrix.cell.files import CellFiles
from ftmatrix.cell.record import Record
from ftmatrix.cell.records import CellRecordFile
from ftmatrix.cell.status import Status
from ftmatrix.check.command import report_text
from ftmatrix.check.compare import same_version
from ftmatrix.check.results import Results, read_results, results_of
from ftmatrix.check.stack import parse_freeze
from ftmatrix.check.verdict import check_stack, lookup_table
from ftmatrix.errors import UsageError
from ftmatrix.report.render import render_report
from ftmatrix.store import merge_outputs

DATA = Path(__file__).parent / "data"
SCRIPT = Path(__file__).parent.parent / "src" / "ftmatrix" / "report" / "assets" / "stack.js"
NODE = shutil.which("node")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SOURCE = "your pip freeze"

pytestmark = pytest.mark.skipif(
    NODE is None and not Path(CHROMIUM).exists(), reason="neither Node.js nor Chromium is installed"
)

# Every request answered by stack.js, loaded as the page loads it (a plain script).
ANSWER = """(request) => {
  const stack = globalThis.ftmatrixStack;
  return {
    answers: request.texts.map((text) => stack.answer(request.data, text, request.source)),
    versions: request.versions.map((v) => {
      const parsed = stack.version.parse(v);
      return parsed ? stack.version.publicText(parsed) : null;
    }),
    order: request.pairs.map(([a, b]) => Math.sign(stack.version.compare(a, b))),
    same: request.pairs.map(([a, b]) => stack.version.same(a, b)),
  };
}"""
NODE_RUNNER = f"""
const fs = require("fs"), vm = require("vm");
vm.runInThisContext(fs.readFileSync(process.argv[1], "utf8"));
const request = JSON.parse(fs.readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(({ANSWER})(request)));
"""


def run_script(
    data: dict[str, Any],
    texts: list[str],
    versions: list[str] = [],  # noqa: B006 (read only)
    pairs: list[tuple[str, str]] = [],  # noqa: B006 (read only)
) -> dict[str, Any]:
    request = {"data": data, "texts": texts, "source": SOURCE, "versions": versions}
    request["pairs"] = [list(p) for p in pairs]
    if NODE is None:
        return run_in_chromium(request)
    done = subprocess.run(
        [NODE, "-e", NODE_RUNNER, str(SCRIPT)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def run_in_chromium(request: dict[str, Any]) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page()
        page.add_script_tag(content=SCRIPT.read_text(encoding="utf-8"))
        out: dict[str, Any] = page.evaluate(ANSWER, request)
        browser.close()
    return out


def check_answer(results: Results, text: str) -> list[str]:
    """What ftmatrix check --freeze prints for ``text``, less its results line."""
    try:
        report = check_stack(parse_freeze(text, source=SOURCE), results)
    except UsageError as error:
        return [str(error)]
    return [line for line in report_text(report).splitlines() if not line.startswith("results: ")]


@cache
def default_results() -> Results:
    return read_results(str(DATA / "default_results.json"))


def freeze_of(results: Results, label: str, **changed: str | None) -> str:
    """The freeze of the cell ``label``'s pins, with ``changed`` ones replaced (None: left out)."""
    pins = next(r.pins for r in results.records if r.cell_label == label)
    merged = {**pins, **changed}
    return "".join(f"{k}=={v}\n" for k, v in merged.items() if v is not None)


FAILING = "cpu-py3.11-torch2.13.0-tf5.23.0-trl1.16.0-peft0.17.1-nounsloth"
PASSING = "cpu-py3.11-torch2.13.0-tf5.23.0-trl1.16.0-peft0.18.1-nounsloth"

FREEZES = [
    freeze_of(default_results(), FAILING),
    freeze_of(default_results(), PASSING),
    # A local label on one side only is the same version; two different ones are not.
    freeze_of(default_results(), PASSING, torch="2.13.0+cpu"),
    freeze_of(default_results(), PASSING, torch="2.13+cu121"),
    # Between, above and below the versions tested, and written in other normal forms.
    freeze_of(default_results(), PASSING, transformers="5.0.0"),
    freeze_of(default_results(), PASSING, transformers="99.0", peft="0.1.0"),
    freeze_of(default_results(), PASSING, trl="1.16.0rc1"),
    freeze_of(default_results(), PASSING, trl="1.16.0.post2", peft="0.18.1.dev0"),
    freeze_of(default_results(), PASSING, trl="v1.16", torch="2.13.0.0"),
    freeze_of(default_results(), PASSING, torch=None),  # not installed
    freeze_of(default_results(), FAILING, trl="0.19.1"),
    # Spellings, comments, options and what a freeze carries without a version.
    "# a training box\nTransformers==5.23.0  # pinned\ntrl===1.16.0\n-i https://pypi.org/simple\n"
    "peft @ https://files.example/peft-0.17.1-py3-none-any.whl#sha256=00\n"
    "torch @ git+https://github.com/pytorch/pytorch@main\n"
    "-e git+https://github.com/unslothai/unsloth@abc#egg=unsloth\n-e file:///home/me/x\n",
    "\ufefftrl==1.16.0\r\ntransformers==4.57.6\r\n",
    "trl[vllm]==0.19.1\ntransformers==4.57.6\npeft @ file:///w/peft-0.17.1.tar.gz\n",
    "trl==1.16.0\n",
    # What check refuses, each with its message.
    "trl>=1.0\n",
    "trl==1.*\n",
    "trl==1.16.0\ntrl==1.16.0\n",
    "-r requirements.txt\n",
    "this is not a freeze!\n",
    "trl===banana\n",
    "- Python version: 3.11.9\n- TRL version: 1.16.0\n",
    "numpy==2.0.0\nrequests==2.32.3\n",
    "",
]


@pytest.fixture(scope="module")
def default_answers() -> dict[str, Any]:
    return run_script(lookup_table(default_results()), FREEZES)


@pytest.mark.parametrize("index", range(len(FREEZES)))
def test_the_page_answers_as_check_does_on_the_default_matrix(default_answers, index):
    assert default_answers["answers"][index] == check_answer(default_results(), FREEZES[index])


def test_the_default_answers_cover_every_verdict_and_line_kind(default_answers):
    text = "\n".join(line for answer in default_answers["answers"] for line in answer)
    for verdict in ("broken", "pass", "n/a", "untested"):
        assert f": {verdict}: " in text, verdict
    for kind in ("nearest: ", "known issue ", "nearest passing: ", "(not installed)", "  note: "):
        assert kind in text, kind
    assert "is not a freeze line" in text
    assert "none of the packages the results test is installed" in text


def synthetic_results() -> Results:
    """Cells that make check say what the default matrix does not: mixed, flaky, a
    constraint with a condition, several exact cells and more than three nearest."""
    records: list[Record] = []

    def add(status: Status, case: str = "test_sft.py::test_sft", **pins: str | None) -> None:
        label = "-".join(["cpu", "py3.11", *(f"{k}{v}" for k, v in pins.items())])
        records.append(
            make_record(
                cell_id=f"id-{label}",
                cell_label=label,
                pins=pins,
                case=case,
                operation=case.split("_", 1)[1].split(".", maxsplit=1)[0],
                status=status,
                flaky=status is Status.CRASH,
                message="RuntimeError: boom" if status.is_break else None,
                exception_type="RuntimeError" if status.is_break else None,
                signature="0123456789ab" if status.is_break else None,
                reason="needs trl>=1" if status is Status.NOT_APPLICABLE else None,
            )
        )

    for trl, unsloth, status in [
        ("1.16.0", "2026.10.7", Status.PASS),
        ("1.16.0", None, Status.FAIL),
        ("1.15.0", "2026.10.7", Status.PASS),
        ("1.15.0", None, Status.PASS),
        ("1.14.0", None, Status.CRASH),
        ("1.13.0", None, Status.NOT_APPLICABLE),
        ("1.12.0", None, Status.FAIL),
        ("1.11.0", None, Status.FAIL),
        *((("1.10.0", f"2026.{month}.0", Status.PASS)) for month in range(1, 6)),
    ]:
        add(status, trl=trl, unsloth=unsloth)
        add(status, case="test_grpo.py::test_grpo", trl=trl, unsloth=unsloth)
    return results_of(records, source="synthetic.json", runs=["r1"])


SYNTHETIC_FREEZES = [
    "trl==1.16.0\n-e git+https://x/unsloth@abc#egg=unsloth\n",  # two exact cells, mixed
    "trl==1.15.0\n-e git+https://x/unsloth@abc#egg=unsloth\n",  # two exact cells, agree
    "trl==1.14.0\n",  # flaky
    "trl==1.13.0\n",  # n/a
    "trl==1.12.5\n",  # between, nearest on both sides
    "trl==1.0.0\nunsloth==2026.10.7\n",  # far below: more than three as near
    "trl==1.11.0\n",  # broken, and a derived constraint
    "trl==1.10.0\n-e git+https://x/unsloth@abc#egg=unsloth\n",  # five exact cells
]


def test_the_page_answers_as_check_does_on_mixed_flaky_and_constrained_cells():
    results = synthetic_results()
    answers = run_script(lookup_table(results), SYNTHETIC_FREEZES)["answers"]
    expected = [check_answer(results, text) for text in SYNTHETIC_FREEZES]
    assert answers == expected
    text = "\n".join(line for answer in answers for line in answer)
    for said in (": mixed: ", ": flaky: ", ": n/a: ", ": untested: ", "more as near", "disagree"):
        assert said in text, said


VERSIONS = [
    "1.0", "1.0.0", "1.0.0.0", "v1.0", " 1.0 ", "1!0.5", "1.0a1", "1.0alpha1", "1.0-beta.2",
    "1.0c3", "1.0rc3", "1.0pre1", "1.0preview1", "1.0.post1", "1.0-1", "1.0r2", "1.0rev3",
    "1.0.dev1", "1.0a1.dev2", "1.0.post1.dev3", "1.0+cpu", "1.0+CU_121", "1.0+1.a", "1.0+01",
    "1.0+abc.5", "2.13.0+cpu", "10.0", "0.9", "1.0a", "1.0.post", "1.0.dev", "nonsense",
    "1.0.*", "",
]  # fmt: skip


def test_versions_are_read_and_ordered_as_packaging_reads_them():
    valid = [v for v in VERSIONS if _is_version(v)]
    pairs = list(itertools.product(valid, repeat=2))
    out = run_script(lookup_table(default_results()), [], VERSIONS, pairs)
    assert out["versions"] == [str(Version(v).public) if _is_version(v) else None for v in VERSIONS]
    assert out["order"] == [(Version(a) > Version(b)) - (Version(a) < Version(b)) for a, b in pairs]
    assert out["same"] == [same_version(a, b) for a, b in pairs]


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except ValueError:
        return False
    return True


def test_the_page_embeds_what_check_computes_from_its_results_json(tmp_path: Path):
    # Four cells of the default matrix's run, one of them with a known issue.
    kept = {FAILING, PASSING, *sorted(r.cell_label for r in default_results().records)[:2]}
    per_cell: dict[tuple[str, str], list[Record]] = {}
    for record in default_results().records:
        if record.cell_label in kept:
            per_cell.setdefault((record.run_id, record.cell_id), []).append(record)
    for (run_id, cell_id), records in per_cell.items():  # one write per cell
        file = CellRecordFile(CellFiles.of(tmp_path, run_id, cell_id).records)
        file.records = records
        file.save()
    merge_outputs(tmp_path)
    render_report(
        tmp_path,
        now=datetime(2026, 11, 22, tzinfo=UTC),
        known_issues=Path(__file__).parent.parent / "known_issues.yaml",
    )
    page = (tmp_path / "index.html").read_text()
    embedded = re.search(r'<script type="application/json" id=stack-data>(.*?)</script>', page)
    assert embedded is not None
    published = read_results(str(tmp_path / "results.json"))
    assert json.loads(embedded.group(1)) == lookup_table(published)
    assert lookup_table(published)["issues"]  # a known issue reaches the page

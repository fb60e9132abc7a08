"""Known issues' ranges proven by cells: the boundaries planned, the verdicts, what is shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from conftest import DATA

from ftmatrix.cell.record import Record
from ftmatrix.check.results import parse_results
from ftmatrix.known_issues import MATCH_KEYS, load_known_issues, parse_known_issues
from ftmatrix.proofs import (
    FAILS,
    OTHERWISE,
    PASSES,
    CellVerdict,
    EntryProof,
    NotProvable,
    claim_key,
    claim_text,
    observe,
    plan_boundaries,
)
from ftmatrix.prove import keep_proof, newest_proofs, stale_entries
from ftmatrix.report.failures import failure_groups
from ftmatrix.report.grid import build_grid
from ftmatrix.report.model import check_results, report_data
from ftmatrix.report.publish import restore_history, write_site
from ftmatrix.report.results_json import render_json
from ftmatrix.store import load_proofs, merge_outputs

KNOWN = {e.id: e for e in load_known_issues(Path(__file__).parent.parent / "known_issues.yaml")}
DOUBLED = KNOWN["transformers-accumulation-loss-doubled"]
NOW = datetime(2026, 11, 27, tzinfo=UTC)
RECORDS = [
    Record.from_mapping(json.loads(line))
    for line in (DATA / "accumulation_records.jsonl").read_text().splitlines()
]
TRANSFORMERS = [
    "4.45.2", "4.46.1", "4.46.2", "4.46.3", "4.47.0", "4.47.1", "4.48.0", "4.48.1", "4.48.2",
    "5.0.0rc1", "5.9.0", "5.10.0", "5.10.1", "5.23.0",
]  # fmt: skip


def releases(package: str) -> list[str]:
    assert package == "transformers"
    return TRANSFORMERS


def cell_records(version: str) -> list[Record]:
    return [r for r in RECORDS if r.packages["transformers"] == version]


def test_the_boundaries_are_the_edges_of_the_range_and_the_fix():
    cells = plan_boundaries(DOUBLED, releases)
    assert [(c.version, c.claim) for c in cells] == [
        ("4.46.3", PASSES),  # the release before the first affected one
        ("4.47.0", FAILS),  # the first affected
        ("4.48.0", FAILS),  # the last affected before the fix
        ("4.48.1", PASSES),  # the fix
    ]
    assert cells[0].pins == {"torch": "2.13.0", "transformers": "4.46.3"}
    over_count = plan_boundaries(KNOWN["transformers-num-items-over-count"], releases)
    assert [(c.version, c.claim) for c in over_count] == [
        ("4.46.1", PASSES),
        ("4.46.2", FAILS),
        ("5.10.0", FAILS),
        ("5.10.1", PASSES),
    ]


def test_an_entry_this_hardware_cannot_run_is_only_claimed():
    gpu = KNOWN["unsloth-grpo-mistral-logits"]
    with pytest.raises(NotProvable, match="needs an l4 GPU"):
        plan_boundaries(gpu, releases)
    assert claim_text(gpu, None) == (
        "fixed in unsloth 2025.3.1 (claimed, not proven: needs an l4 GPU)"
    )
    assert claim_text(KNOWN["trl-sft-dataparallel-batch"], None) == (
        "affects an unestablished range (claimed, not proven: needs 2 GPUs)"
    )
    assert claim_text(DOUBLED, None) == (
        "fixed in transformers 4.48.1 (claimed, not proven: no proof run yet)"
    )


def test_real_cells_prove_the_doubling_and_refute_a_wrong_fixed_release():
    verdicts = [
        CellVerdict(
            cell=c, label=f"tf{c.version}", observed=observe(DOUBLED, cell_records(c.version))
        )
        for c in plan_boundaries(DOUBLED, releases)
    ]
    # 4.46.3 and 4.48.1 fail, but with the over-count's shape: not this entry's.
    assert [v.observed for v in verdicts] == [OTHERWISE, FAILS, FAILS, OTHERWISE]
    proof = EntryProof(
        entry=DOUBLED.id, date="2026-11-27", ftmatrix_version="0.1.0", cells=tuple(verdicts)
    )
    assert proof.verdict == "proven"
    # A fixture entry claiming transformers 4.48.0 fixed it: 4.48.0's cell still doubles.
    (wrong,) = parse_known_issues(
        [
            {
                "id": "wrong",
                "title": "t",
                "package": "transformers",
                "upstream": "https://github.com/huggingface/transformers/issues/35663",
                "match": {
                    "message": "weights after one SGD step \\(",
                    "cases": ["test_train_exact_update"],
                    "parametrizations": {"accumulation-1*": "pass", "accumulation-2*": "fail"},
                },
                # match.packages defaults to this range: the proof judges the shape alone.
                "affected": {"transformers": ">=4.47.0,<4.47.1"},
                "fixed-in": {"transformers": "4.48.0"},
                "proof": {"cases": ["test_train.py::test_train_exact_update"]},
            }
        ],
        source="fixture.yaml",
    )
    cells = plan_boundaries(wrong, releases)
    assert [(c.version, c.claim) for c in cells] == [
        ("4.46.3", PASSES),
        ("4.47.0", FAILS),
        ("4.48.0", PASSES),
    ]
    verdicts = [
        CellVerdict(
            cell=c, label=f"cell-tf{c.version}", observed=observe(wrong, cell_records(c.version))
        )
        for c in cells
    ]
    proof = EntryProof(
        entry="wrong",
        date="2026-11-27",
        ftmatrix_version="0.1.0",
        cells=tuple(verdicts),
        claim=claim_key(wrong),
    )
    assert proof.verdict == "contradicted"
    assert [c.label for c in proof.contradicting] == ["cell-tf4.48.0"]
    assert claim_text(wrong, proof) == (
        "fixed in transformers 4.48.0 (contradicted 2026-11-27: transformers 4.48.0 fails in "
        "cell-tf4.48.0)"
    )


def test_a_proof_is_kept_in_the_history_and_shown_by_the_report_and_check(tmp_path: Path):
    cells = plan_boundaries(DOUBLED, releases)
    observed = [OTHERWISE, FAILS, FAILS, OTHERWISE]
    proof = EntryProof(
        entry=DOUBLED.id,
        date="2026-11-27",
        ftmatrix_version="0.1.0",
        cells=tuple(
            CellVerdict(cell=c, label=c.version, observed=o)
            for c, o in zip(cells, observed, strict=True)
        ),
        claim=claim_key(DOUBLED),
    )
    out = tmp_path / "out"
    keep_proof(out, proof, proven_at="2026-11-27T04:00:00+00:00")
    assert (
        json.loads((out / "proofs" / DOUBLED.id / "proof.json").read_text())["verdict"] == "proven"
    )
    # A report elsewhere merges the proof file as it merges bisect findings.
    (other := tmp_path / "other" / "proofs" / DOUBLED.id).mkdir(parents=True)
    (other / "proof.json").write_text((out / "proofs" / DOUBLED.id / "proof.json").read_text())
    merge_outputs(tmp_path / "other")
    assert set(load_proofs(tmp_path / "other" / "history.sqlite")) == {DOUBLED.id}
    proofs = newest_proofs(out)
    text = claim_text(DOUBLED, proofs[DOUBLED.id])
    assert text == (
        "fixed in transformers 4.48.1 (proven 2026-11-27: 4.46.3 fails otherwise, 4.47.0 fails, "
        "4.48.0 fails, 4.48.1 fails otherwise)"
    )
    groups = failure_groups(RECORDS, list(KNOWN.values()), proofs=proofs)
    grid = build_grid(RECORDS)
    results = parse_results(
        json.loads(render_json(report_data(grid, generated_at=NOW, groups=groups))),
        source="results.json",
    )
    at_470 = next(
        r for r in RECORDS if r.packages["transformers"] == "4.47.0" and r.status.value == "fail"
    )
    (link,) = results.known_issues(at_470)
    assert (link.id, link.claim) == (DOUBLED.id, text)
    assert check_results(grid, groups).known_issues(at_470)[0].claim == text
    # A proof made for another claim than the entry's now is no proof of it.
    assert "claimed, not proven" in claim_text(
        DOUBLED, EntryProof(**{**proof.__dict__, "claim": "old"})
    )


def test_stale_proofs_are_proven_again():
    proof = {
        "claim": claim_key(DOUBLED),
        "cells": [{"package": "transformers", "version": "4.48.1"}],
    }
    assert stale_entries([DOUBLED], {}, releases) == [DOUBLED]
    assert stale_entries([DOUBLED], {DOUBLED.id: proof}, releases) == []
    assert stale_entries([DOUBLED], {DOUBLED.id: {**proof, "claim": "x"}}, releases) == [DOUBLED]
    # An open range (no fixed release): a release newer than every proof cell is unproven.
    (open_range,) = parse_known_issues(
        [
            {
                "id": "open",
                "title": "t",
                "package": "transformers",
                "upstream": "https://github.com/huggingface/transformers/issues/1",
                "match": {"message": "x"},
                "affected": {"transformers": ">=5.9.0"},
            }
        ],
        source="k.yaml",
    )
    seen = {
        "claim": claim_key(open_range),
        "cells": [{"package": "transformers", "version": "5.10.1"}],
    }
    assert stale_entries([open_range], {"open": seen}, releases) == [open_range]


def test_check_says_whether_the_fixed_release_is_proven(tmp_path: Path):
    """A real ``ftmatrix check`` against a results.json whose report held a proof."""
    cells = plan_boundaries(DOUBLED, releases)
    observed = [OTHERWISE, FAILS, FAILS, OTHERWISE]
    proof = EntryProof(
        entry=DOUBLED.id,
        date="2026-11-27",
        ftmatrix_version="0.1.0",
        cells=tuple(
            CellVerdict(cell=c, label=c.version, observed=o)
            for c, o in zip(cells, observed, strict=True)
        ),
        claim=claim_key(DOUBLED),
    )
    known = list(KNOWN.values())
    groups = failure_groups(RECORDS, known, proofs={DOUBLED.id: proof})
    results = tmp_path / "results.json"
    results.write_text(
        render_json(report_data(build_grid(RECORDS), generated_at=NOW, groups=groups))
    )
    ran = subprocess.run(
        [sys.executable, "-m", "ftmatrix", "check", "--freeze", "-", "--results", str(results)]
        + ["--operation", "train"],
        input="torch==2.13.0+cpu\ntransformers==4.47.0\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")},
        timeout=120,
        check=False,
    )
    assert ran.returncode == 1, ran.stderr
    lines = ran.stdout.splitlines()
    at = lines.index(
        "  known issue transformers-accumulation-loss-doubled: " + DOUBLED.title + " "
        "https://github.com/huggingface/transformers/issues/35663"
    )
    assert lines[at + 1] == (
        "    fixed in transformers 4.48.1 (proven 2026-11-27: 4.46.3 fails otherwise, 4.47.0 "
        "fails, 4.48.0 fails, 4.48.1 fails otherwise)"
    )
    # The over-count's title, link and workaround are nowhere beside 4.47.0's reds.
    assert "46204" not in ran.stdout and "transformers-num-items-over-count" not in ran.stdout


def test_the_guide_shows_the_shipped_entry_and_what_prove_prints():
    """docs/guides/known-issues.md: its example is the shipped entry, its table names every
    match key, and the proof line is what a proof of those verdicts prints."""
    guide = (Path(__file__).parent.parent / "docs" / "guides" / "known-issues.md").read_text()
    example = guide.split("```yaml\n", 1)[1].split("```", 1)[0]
    shipped = yaml.safe_load((Path(__file__).parent.parent / "known_issues.yaml").read_text())
    assert yaml.safe_load(example) == [e for e in shipped if e["id"] == DOUBLED.id]
    for key in MATCH_KEYS:
        assert f"| `{key}`" in guide or f", `{key}`" in guide, key
    cells = plan_boundaries(DOUBLED, releases)
    proof = EntryProof(
        entry=DOUBLED.id,
        date="2026-11-27",
        ftmatrix_version="0.1.0",
        cells=tuple(
            CellVerdict(cell=c, label=c.version, observed=o)
            for c, o in zip(cells, [OTHERWISE, FAILS, FAILS, OTHERWISE], strict=True)
        ),
        claim=claim_key(DOUBLED),
    )
    assert f"[ftmatrix] {DOUBLED.id}: proven: {claim_text(DOUBLED, proof)}\n" in guide
    assert f"    {claim_text(KNOWN['unsloth-grpo-mistral-logits'], None)}\n" in guide


def test_a_lost_history_gets_its_proofs_back_from_the_published_copy(tmp_path: Path):
    """The nightly proves again only what is stale: the proofs travel in history.jsonl."""
    cells = plan_boundaries(DOUBLED, releases)
    proof = EntryProof(
        entry=DOUBLED.id,
        date="2026-11-27",
        ftmatrix_version="0.1.0",
        cells=tuple(CellVerdict(cell=c, label=c.version, observed=FAILS) for c in cells),
        claim=claim_key(DOUBLED),
    )
    out = tmp_path / "out"
    keep_proof(out, proof, proven_at="2026-11-27T04:00:00+00:00")
    site = write_site(out)
    lost = tmp_path / "lost" / "history.sqlite"
    restore_history(str(site / "history.jsonl"), lost)
    restored = load_proofs(lost)[DOUBLED.id]
    assert EntryProof.from_mapping(restored) == proof
    assert restored["proven_at"] == "2026-11-27T04:00:00+00:00"

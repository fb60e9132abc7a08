"""Result reuse's decisions, as pure functions: keys, statuses, ages, fingerprints."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from conftest import make_record
from hypothesis import given
from hypothesis import strategies as st

from ftmatrix.cell.record import Record
from ftmatrix.cell.status import Status
from ftmatrix.config import ConfigError, Limits, Timeouts, parse_matrix
from ftmatrix.report.grid import build_grid
from ftmatrix.report.model import report_data
from ftmatrix.report.page import render_html
from ftmatrix.report.results_json import render_json
from ftmatrix.report.summary import render_markdown
from ftmatrix.resolve import lock_id, locked_packages
from ftmatrix.reuse import (
    NEVER_REUSED,
    RECORD_VERSION,
    CellKey,
    EarlierRun,
    carried_forward,
    cases_id,
    decide,
    hardware_id,
    judging,
    moved_packages,
    newest_hardware_of_class,
    not_reusable,
    refresh_due,
    refresh_offset,
)
from ftmatrix.settings import Settings

TODAY = date(2026, 12, 1)
L4 = {
    "machine": "x86_64",
    "system": "Linux",
    "cpu": "AMD EPYC 7B13",
    "cpu_count": 8,
    "memory_gib": 62.8,
    "gpus": [
        {
            "name": "NVIDIA L4",
            "memory_mib": "23034",
            "driver": "550.54.15",
            "compute_capability": "8.9",
        }
    ],
    "gpu_count": 1,
    "cuda_visible_devices": None,
    "gpu_lease": None,
}


def lock_text(packages: dict[str, str]) -> str:
    return "".join(f"{name}=={version}\n    # via -r -\n" for name, version in packages.items())


def key(packages: dict[str, str] | None = None, **changes: object) -> CellKey:
    packages = packages or {"six": "1.17.0", "certifi": "2026.6.17"}
    fields: dict[str, object] = {
        "lock_id": lock_id(lock_text(packages)),
        "cases_id": "c" * 16,
        "hardware_id": hardware_id(L4),
        "packages": packages,
        **changes,
    }
    return CellKey(**fields)  # type: ignore[arg-type]


def earlier(
    records: tuple[Record, ...] | None = None, *, ran_on: date = TODAY, **key_changes: object
) -> EarlierRun:
    return EarlierRun(
        run_id="20261130T020000Z",
        key=key(**key_changes),  # type: ignore[arg-type]
        records=records if records is not None else (make_record(),),
        since="20261130T020000Z",
        ran_on=ran_on,
    )


def test_an_unchanged_cell_is_reused_and_says_since_when():
    decision = decide("abc", key(), earlier(), max_age_days=7, today=TODAY)
    assert decision.reuse
    assert decision.describe() == "reused (unchanged since 20261130T020000Z)"
    assert decision.to_dict() == {
        "action": "reuse",
        "reason": "unchanged",
        "since": "20261130T020000Z",
    }


@pytest.mark.parametrize(
    ("tonight", "expected"),
    [
        (key(cases_id="d" * 16), "cases changed"),
        (key(hardware_id="elsewhere"), "hardware changed"),
        (
            key(version=RECORD_VERSION + 1),
            f"ftmatrix's records changed (version {RECORD_VERSION}->{RECORD_VERSION + 1})",
        ),
        (
            key({"six": "1.17.0", "certifi": "2026.7.22"}),
            "new lock: certifi 2026.6.17->2026.7.22",
        ),
        (
            key({"six": "1.17.0", "certifi": "2026.6.17", "idna": "3.18"}),
            "new lock: +idna 3.18",
        ),
        (key(cases_id="d" * 16, hardware_id="elsewhere"), "cases changed; hardware changed"),
    ],
)
def test_any_change_runs_the_cell_and_says_what_changed(tonight: CellKey, expected: str):
    decision = decide("abc", tonight, earlier(), max_age_days=7, today=TODAY)
    assert not decision.reuse
    assert decision.reason == expected
    assert decision.describe() == f"run: {expected}"


def test_what_leaves_nothing_to_compare_runs_the_cell():
    def reason(tonight: CellKey | None, before: EarlierRun | None, days: int = 7) -> str:
        return decide("abc", tonight, before, max_age_days=days, today=TODAY).reason

    assert reason(key(), None) == "no earlier run"
    assert reason(None, earlier()) == "no lock (the cell does not resolve)"
    assert reason(key(), earlier(), 0) == "reuse off"
    unfinished = EarlierRun(run_id="R", key=None, records=(make_record(),), since="R")
    assert reason(key(), unfinished) == "earlier run R did not finish the cell"


@pytest.mark.parametrize("status", sorted(NEVER_REUSED, key=lambda s: s.value))
def test_results_of_a_bad_night_are_never_reused(status: Status):
    records = (make_record(), make_record(case="test_x.py::test_y", status=status))
    decision = decide("abc", key(), earlier(records), max_age_days=7, today=TODAY)
    assert not decision.reuse
    assert decision.reason == f"earlier result not reusable ({status.value}: test_x.py::test_y)"


def test_a_flaky_result_is_never_reused():
    records = (make_record(flaky=True),)
    assert not_reusable(records) == "flaky: test_sft.py::test_sft"
    assert not decide("abc", key(), earlier(records), max_age_days=7, today=TODAY).reuse


@pytest.mark.parametrize("status", [Status.PASS, Status.FAIL, Status.SKIP, Status.NOT_APPLICABLE])
def test_a_steady_result_is_reused(status: Status):
    assert not_reusable((make_record(status=status),)) is None


def test_the_never_reused_statuses_are_the_issues_list():
    assert {s.value for s in NEVER_REUSED} == {"timeout", "crash", "oom", "install-error", "error"}


@given(
    packages=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True),
        st.from_regex(r"[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?", fullmatch=True),
        min_size=1,
        max_size=12,
    ),
    data=st.data(),
)
def test_a_lock_that_differs_in_any_one_package_is_rerun(packages: dict[str, str], data):
    name = data.draw(st.sampled_from(sorted(packages)))
    new_version = data.draw(
        st.from_regex(r"[0-9]{1,3}\.[0-9]{1,3}", fullmatch=True).filter(
            lambda v: v != packages[name]
        )
    )
    moved = {**packages, name: new_version}
    before = EarlierRun(
        run_id="R", key=key(packages), records=(make_record(),), since="R", ran_on=TODAY
    )
    decision = decide("abc", key(moved), before, max_age_days=7, today=TODAY)
    assert not decision.reuse
    assert decision.reason == f"new lock: {name} {packages[name]}->{new_version}"
    # ... and an unchanged lock, in any order, is reused.
    shuffled = dict(reversed(list(packages.items())))
    assert decide("abc", key(shuffled), before, max_age_days=7, today=TODAY).reuse


def test_the_lock_packages_come_from_the_lock_text():
    lock = "# header\nsix==1.17.0\n    # via -r -\ncertifi==2026.7.22\n--find-links /x\n"
    assert locked_packages(lock) == {"six": "1.17.0", "certifi": "2026.7.22"}
    assert moved_packages({"a": "1", "b": "2"}, {"a": "1", "c": "3"}) == ["-b 2", "+c 3"]


def test_the_fingerprint_ignores_what_differs_between_runs_on_one_machine():
    same = {
        **L4,
        "memory_gib": 31.0,
        "cpu_count": 4,
        "cuda_visible_devices": "0",
        "gpu_lease": "0",
        "torch": {"version": "2.13.0", "cuda_device_count": 1},  # the plugin's view only
    }
    assert hardware_id(same) == hardware_id(L4)
    for changed in (
        {**L4, "gpus": [{**L4["gpus"][0], "name": "NVIDIA A100-SXM4-80GB"}]},
        {**L4, "gpus": [{**L4["gpus"][0], "driver": "560.35.03"}]},
        {**L4, "gpus": L4["gpus"] * 2, "gpu_count": 2},
        {**L4, "cpu": "Intel Xeon Platinum 8481C"},
        {**L4, "machine": "aarch64"},
    ):
        assert hardware_id(changed) != hardware_id(L4)


def test_max_age_forces_a_re_run_on_the_cells_refresh_night():
    cell = "abc123def456"
    ran = TODAY
    due = [d for d in range(1, 15) if refresh_due(cell, ran, ran + timedelta(days=d), 7)]
    # The first refresh night after it ran: the night the cell's offset names, within 7.
    (first,) = [d for d in range(1, 8) if (ran.toordinal() + d) % 7 == refresh_offset(cell, 7) % 7]
    assert due[0] == first  # never older than max-age-days
    assert due == list(range(due[0], 15))  # once due, due until it runs
    decision = decide(
        cell, key(), earlier(ran_on=ran), max_age_days=7, today=ran + timedelta(days=due[0])
    )
    assert not decision.reuse
    assert decision.reason == "too old (ran 2026-12-01; re-run every 7 days at most)"
    before = decide(
        cell, key(), earlier(ran_on=ran), max_age_days=7, today=ran + timedelta(days=due[0] - 1)
    )
    assert before.reuse
    # Run again on its refresh night, it is next due exactly 7 nights later.
    again = ran + timedelta(days=due[0])
    assert [d for d in range(1, 8) if refresh_due(cell, again, again + timedelta(days=d), 7)] == [7]


def test_the_re_runs_are_spread_over_the_nights():
    cells = [f"{i:012x}" for i in range(700)]
    start = date(2026, 12, 1)
    # Every cell ran on night 0; each night after, the due cells run (and are not due again).
    last = dict.fromkeys(cells, start)
    per_night = []
    for night in range(1, 22):
        today = start + timedelta(days=night)
        due = [c for c in cells if refresh_due(c, last[c], today, 7)]
        for c in due:
            last[c] = today
        per_night.append(len(due))
    assert sum(per_night[:7]) == 700  # each cell once in the first 7 nights ...
    assert max(per_night) < 700 / 7 * 1.5  # ... about a seventh each night
    assert per_night[7:14] == per_night[:7] == per_night[14:21]
    assert {refresh_offset(c, 7) for c in cells} == set(range(7))


def test_reused_records_keep_their_results_and_name_the_run_that_ran_them():
    record = make_record(run_id="R1")
    [carried] = carried_forward([record], run_id="R3", since="R1")
    assert (carried.run_id, carried.reused_from, carried.status) == ("R3", "R1", Status.PASS)
    assert Record.from_mapping(carried.to_dict()) == carried
    older = record.to_dict()
    del older["reused_from"]  # records written before reuse existed
    assert Record.from_mapping(older).reused_from is None


def test_the_plan_takes_each_hardware_class_newest_fingerprint():
    def run(since: str, hardware: str, cls: str) -> EarlierRun:
        return EarlierRun(
            run_id=since,
            key=key(hardware_id=hardware),
            records=(make_record(hardware_class=cls),),
            since=since,
        )

    runs = [run("R1", "old", "l4"), run("R2", "new", "l4"), run("R1", "x", "cpu")]
    assert newest_hardware_of_class(runs) == {"l4": "new", "cpu": "x"}


def test_the_cases_key_holds_the_selected_files_and_every_helper(tmp_path: Path):
    (tmp_path / "test_a.py").write_text("def test_a(): pass\n")
    (tmp_path / "test_b.py").write_text("def test_b(): pass\n")
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "helpers").mkdir()
    (tmp_path / "helpers" / "util.py").write_text("X = 1\n")
    before = cases_id(tmp_path, ["test_a.py::test_a"])
    whole = cases_id(tmp_path)
    (tmp_path / "test_b.py").write_text("def test_b(): assert 0\n")
    assert cases_id(tmp_path, ["test_a.py::test_a"]) == before  # not selected
    assert cases_id(tmp_path) != whole  # the whole folder selects it
    for path in ("test_a.py", "conftest.py", "helpers/util.py"):
        (tmp_path / path).write_text((tmp_path / path).read_text() + "# changed\n")
        assert cases_id(tmp_path, ["test_a.py::test_a"]) != before, path
        before = cases_id(tmp_path, ["test_a.py::test_a"])


def test_a_changed_time_or_memory_limit_changes_the_cases_key(tmp_path: Path):
    """A lower limit can turn last night's pass into a timeout or an oom: it re-runs."""
    (tmp_path / "test_a.py").write_text("def test_a(): pass\n")
    keys = {
        cases_id(tmp_path, [], judging(options, timeouts, limits))
        for options, timeouts, limits in [
            ((), Timeouts(), Limits()),
            (("-k", "a"), Timeouts(), Limits()),
            ((), Timeouts(case=60.0), Limits()),
            ((), Timeouts(), Limits(memory_gib=4.0)),
        ]
    }
    assert len(keys) == 4
    assert cases_id(tmp_path, [], judging((), Timeouts(), Limits())) == cases_id(
        tmp_path, [], judging((), Timeouts(), Limits())
    )
    # The key names each field: what a field added later cannot silently change.
    assert judging(("-k", "a"), Timeouts(case=60.0), Limits(memory_gib=4.0)) == (
        "-k", "a", "timeouts.case=60", "timeouts.cell=3600", "limits.memory-gib=4",
        "limits.workers=1",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("reuse: 7", "F: reuse: must be a mapping such as {max-age-days: 7}, got 7"),
        (
            "reuse: {max-age-days: -1}",
            "F: reuse.max-age-days: must be a whole number of days >= 0 (0: off), got -1",
        ),
        (
            "reuse: {max-age-days: 1.5}",
            "F: reuse.max-age-days: must be a whole number of days >= 0 (0: off), got 1.5",
        ),
        (
            "reuse: {max-age: 7}",
            "F: reuse.max-age: unknown key; allowed: max-age-days. "
            "Perhaps you meant 'max-age-days'?",
        ),
    ],
)
def test_a_bad_reuse_key_is_one_clear_line(text: str, message: str):
    with pytest.raises(ConfigError) as info:
        parse_matrix(f"packages: {{six: ['1.17.0']}}\n{text}\n", source="F", default_python="3.11")
    assert list(info.value.problems) == [message]


def test_reuse_is_off_unless_the_matrix_sets_it_and_one_run_can_turn_it_off(tmp_path: Path):
    plain = parse_matrix("packages: {six: ['1.17.0']}", source="F", default_python="3.11")
    assert plain.reuse.max_age_days == 0
    on = parse_matrix(
        "packages: {six: ['1.17.0']}\nreuse: {max-age-days: 7}", source="F", default_python="3.11"
    )
    assert on.reuse.max_age_days == 7
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert Settings.from_env({}, root=tmp_path, now=now).reuse
    assert not Settings.from_env({"FTMATRIX_REUSE": "0"}, root=tmp_path, now=now).reuse


def test_the_report_counts_reused_cells_and_says_since_when_per_cell():
    ran = make_record(run_id="R3", cell_id="aaa", cell_label="cpu-six1.17.0")
    kept = make_record(run_id="R3", cell_id="bbb", cell_label="cpu-six1.16.0", reused_from="R1")
    grid = build_grid([ran, kept])
    data = report_data(grid, generated_at=datetime(2026, 12, 1, tzinfo=UTC))
    markdown = render_markdown(data)
    assert "1 of 2 cells reused (unchanged since an earlier run)" in markdown
    assert "| cpu-six1.16.0 (reused, unchanged since R1) | pass |" in markdown
    assert "| cpu-six1.17.0 | pass |" in markdown
    page = render_html(data)
    assert "<strong>1</strong> cell ran 1 case; <strong>1</strong> cell reused" in page
    assert "<div class=reused>reused (unchanged since R1)</div>" in page
    assert json.loads(render_json(data))["reused_cells"] == {"cpu-six1.16.0": "R1"}


def test_the_cases_key_holds_the_selection_and_pytest_options(tmp_path: Path):
    (tmp_path / "test_a.py").write_text("def test_a(): pass\ndef test_b(): pass\n")
    whole = cases_id(tmp_path, ["test_a.py"])
    assert cases_id(tmp_path, ["test_a.py::test_a"]) != whole  # some cases of the file
    assert cases_id(tmp_path, ["test_a.py"], ["-k", "test_a"]) != whole
    assert cases_id(tmp_path, ["test_a.py"]) == whole

"""The results plugin in a real pytest run: one status per outcome, blame assigned right."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_plugin
from hypothesis import given
from hypothesis import strategies as st
from packaging.utils import canonicalize_name as packaging_canonical

from ftmatrix.cell.gates import canonicalize_name, hardware_gap, package_gap

pytest_plugins = ["pytester"]

CASES = """
import pytest

@pytest.mark.operation("ok")
def test_pass(record_property):
    record_property("loss", 0.5)

@pytest.mark.requires_packages(packaging=">=999")
def test_feature_missing():
    raise AssertionError("must not run")

@pytest.mark.requires_hardware(cuda=True)
def test_needs_gpu():
    raise AssertionError("must not run")

def test_wrong_result():
    assert sum([1, 1]) == 3, "the framework computed the wrong thing"

class ContractError(AssertionError):  # as cases/helpers/contracts.py: a check of the numbers
    pass

def test_contract_broken():
    raise ContractError("loss: trainer 1.0 != reference 2.0 (tolerance 0.0001)")

def test_framework_raises():
    from packaging.version import Version
    Version("not a version")

def test_our_bug():
    return {}["missing"]

def test_framework_fails_in_its_compiled_code():
    import yaml  # PyYAML's C parser is Cython: its frames are named "yaml/_yaml.pyx"
    yaml.load("a: [1, 2", Loader=yaml.CSafeLoader)

def test_our_bug_in_compiled_code():
    import yaml._yaml
    yaml._yaml.CParser("a: [1, 2").get_single_node()

@pytest.fixture
def broken_fixture():
    raise TypeError("our fixture is wrong")

def test_setup_error(broken_fixture):
    pass

def test_dynamic_na():
    from ftmatrix.cell.plugin import not_applicable
    not_applicable("no GRPOTrainer in this trl")

def test_out_of_memory():
    raise MemoryError()
"""


def run_cases(pytester: pytest.Pytester, tmp_path: Path) -> dict[str, dict]:
    pytester.makepyfile(test_cases=CASES)
    return run_plugin(pytester, tmp_path)


def test_a_pytest_of_one_process_writes_its_records_without_the_folder_lock(
    pytester: pytest.Pytester, tmp_path: Path
):
    # Cells of a run share the records folder; a pytest of one process is its records
    # file's only writer while it runs, so another cell's lock never holds its records up.
    pytester.makepyfile(test_few="def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    folder = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)  # as another cell's record being written
        records = run_plugin(pytester, tmp_path, timeout=30)
    finally:
        os.close(folder)
    assert {name: r["status"] for name, r in records.items()} == {
        "test_one": "pass",
        "test_two": "pass",
    }


def test_markers_above_a_case_gate_it_and_mark_its_operation(
    pytester: pytest.Pytester, tmp_path: Path
):
    # The markers a case asks by are looked up once per case: its own, its class's and
    # its module's all count, and a file whose cases ask nothing runs no gate.
    pytester.makepyfile(
        test_asking="""
import pytest

pytestmark = pytest.mark.operation("sft")

class TestNewer:
    pytestmark = pytest.mark.requires_packages(packaging=">=999")

    def test_in_class(self):
        pass

@pytest.mark.requires_hardware(gpus=1)
def test_on_a_gpu():
    pass

def test_plain():
    pass
""",
        test_quiet="def test_nothing_asked():\n    pass\n",
    )
    records = run_plugin(pytester, tmp_path)
    assert {name: (r["status"], r["operation"]) for name, r in records.items()} == {
        "TestNewer": ("n/a", "sft"),
        "test_on_a_gpu": ("skip", "sft"),
        "test_plain": ("pass", "sft"),
        "test_nothing_asked": ("pass", "quiet"),
    }


def test_a_marker_a_conftest_adds_last_among_the_collection_hooks_still_gates(
    pytester: pytest.Pytester, tmp_path: Path
):
    # The markers are looked up once per case, after every collection hook: a conftest's
    # hook that runs after the recorder's (trylast, registered before it) still counts.
    pytester.makeconftest(
        """
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.name == "test_later":
            item.add_marker(pytest.mark.requires_packages(packaging=">=999"))
            item.add_marker(pytest.mark.operation("marked-late"))
"""
    )
    pytester.makepyfile(test_late="def test_later():\n    pass\n\ndef test_other():\n    pass\n")
    records = run_plugin(pytester, tmp_path)
    assert {name: (r["status"], r["operation"]) for name, r in records.items()} == {
        "test_later": ("n/a", "marked-late"),
        "test_other": ("pass", "late"),
    }


def test_each_outcome_gets_its_one_status(pytester: pytest.Pytester, tmp_path: Path):
    records = run_cases(pytester, tmp_path)
    statuses = {name: r["status"] for name, r in records.items()}
    assert statuses == {
        "test_pass": "pass",
        "test_feature_missing": "n/a",
        "test_needs_gpu": "skip",
        "test_wrong_result": "fail",
        "test_contract_broken": "fail",
        "test_framework_raises": "fail",
        "test_our_bug": "error",
        "test_framework_fails_in_its_compiled_code": "fail",
        "test_our_bug_in_compiled_code": "error",
        "test_setup_error": "error",
        "test_dynamic_na": "n/a",
        "test_out_of_memory": "oom",
    }
    assert records["test_pass"]["metrics"] == {"loss": 0.5}
    assert records["test_pass"]["operation"] == "ok"
    assert records["test_our_bug"]["operation"] == "cases"
    assert records["test_feature_missing"]["reason"].endswith("is outside >=999")
    assert records["test_needs_gpu"]["reason"] == "needs 1 CUDA GPU; this machine has no CUDA GPU"
    raised = records["test_framework_raises"]
    assert raised["exception_type"] == "packaging.version.InvalidVersion"
    assert raised["framework_frame"].startswith("packaging/version.py:")
    assert len(raised["signature"]) == 12
    assert "Invalid version" in raised["traceback"]
    assert records["test_our_bug"]["exception_type"] == "KeyError"
    assert records["test_our_bug"]["framework_frame"] is None
    assert "packaging" in {name.lower() for name in raised["packages"]}
    assert raised["hardware"]["cpu_count"] >= 1


def test_a_lone_surrogate_in_a_message_keeps_the_fail_and_its_message(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    # Text decoded with surrogateescape (a file name, a subprocess's bytes) holds lone
    # surrogates, which UTF-8 cannot; the signature's hash and the record file both need it.
    pytester.makepyfile(
        test_surrogate="""
def test_undecodable():
    name = b"model-\\xff.bin".decode("utf-8", "surrogateescape")
    raise AssertionError(f"cannot load {name}: wrong shape \\ud800")
"""
    )
    record = run_plugin(pytester, tmp_path)["test_undecodable"]
    assert record["status"] == "fail"
    assert record["message"] == "cannot load model-\\udcff.bin: wrong shape \\ud800"
    assert len(record["signature"]) == 12


# A plugin that runs each case through pytest's protocol with its logging held back, as
# pytest-rerunfailures does: all three phases' reports are made before any is logged. It
# runs before the results plugin's own protocol hook, which never sees the case.
LOGS_AFTER = """
import pytest
from _pytest.runner import runtestprotocol


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in runtestprotocol(item, nextitem=nextitem, log=False):
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
"""


def test_a_failure_logged_after_all_its_phases_is_still_a_failure(
    pytester: pytest.Pytester, tmp_path: Path
):
    """Each phase's exception goes with its own report, whenever it is logged: taken
    from the last phase made, the call's failure went to the setup's report, and the
    case was recorded a pass."""
    pytester.makeconftest(LOGS_AFTER)
    pytester.makepyfile(
        test_later="""
        import pytest

        pytestmark = pytest.mark.operation("sft")

        def test_fails(tmp_path):
            assert not tmp_path.exists()  # pytest made it: the case's check fails

        def test_passes():
            pass
        """
    )
    records = run_plugin(pytester, tmp_path)
    assert {name: r["status"] for name, r in records.items()} == {
        "test_fails": "fail",
        "test_passes": "pass",
    }  # both in one process: a case the note never named did not end it
    assert records["test_fails"]["operation"] == "sft"  # its marker, read at collection


def test_package_gap_messages():
    installed = {"trl": "0.19.1"}
    assert package_gap("trl", ">=0.14", installed) is None
    assert package_gap("trl", ">=1.0", installed) == "trl 0.19.1 is outside >=1.0"
    assert package_gap("vllm", ">=0.10", installed) == (
        "vllm is not installed in this cell (needs vllm>=0.10)"
    )


@given(st.text(alphabet="aAzZ09-_.", max_size=12))
def test_the_gates_name_packages_as_packaging_does(name: str):
    # The gates' own copy spares each pytest of a cell packaging's import.
    assert canonicalize_name(name) == packaging_canonical(name)


def test_loading_the_plugin_leaves_packaging_for_the_cases_that_ask_versions():
    # Every pytest of every cell loads the plugin: packaging's modules cost it 8 ms.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, ftmatrix.cell.plugin; print(sorted(sys.modules))"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "packaging" not in loaded
    assert package_gap("packaging", ">=1", {"packaging": "26.0"}) is None  # imported here


def test_the_cell_s_versions_are_importlib_metadata_s(tmp_path: Path):
    # Read from the headers alone (each dist.metadata parsed the whole file, long
    # description and all): the same names and versions as importlib.metadata's.
    from importlib import metadata

    from ftmatrix.cell.gates import _name_and_version

    (tmp_path / "legacy_pkg-1.2.egg-info").write_text(  # distutils's: one file
        "Metadata-Version: 1.1\nname: legacy-pkg\nversion: 1.2\n"
    )
    info = tmp_path / "odd_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: Odd_Pkg\nSummary: Version: 9 in a summary\n"
        "Version: 1.0\nVersion: 2.0\n\nName: not-this\nVersion: 3.0\n" + "x" * 10_000
    )
    distributions = [*metadata.distributions(), *metadata.distributions(path=[str(tmp_path)])]
    assert len(distributions) > 20  # the test environment's, and the odd one
    for dist in distributions:
        assert _name_and_version(dist) == (dist.metadata["Name"], dist.version)
    assert _name_and_version(metadata.Distribution.at(info)) == ("Odd_Pkg", "1.0")
    legacy = metadata.Distribution.at(tmp_path / "legacy_pkg-1.2.egg-info")
    assert _name_and_version(legacy) == ("legacy-pkg", "1.2")


def test_hardware_gap_messages():
    no_gpu = {"gpu_count": 0, "torch": {"cuda_device_count": 0}}
    one_gpu = {
        "gpu_count": 1,
        "torch": {"cuda_device_count": 1, "devices": [{"compute_capability": "8.9"}]},
    }
    assert hardware_gap({"gpus": 2}, one_gpu) == "needs 2 CUDA GPUs; this machine has 1 CUDA GPU"
    assert hardware_gap({"cuda": True}, one_gpu) is None
    assert hardware_gap({"cuda": True}, no_gpu) == "needs 1 CUDA GPU; this machine has no CUDA GPU"
    assert hardware_gap({"cuda": True, "min_compute_capability": "9.0"}, one_gpu) == (
        "needs compute capability >= 9.0; this machine has 8.9"
    )


def test_gpus_n_is_checked_against_the_cell_s_lease_not_the_one_gpu_the_case_sees():
    one_gpu = {"gpu_count": 4, "torch": {"cuda_device_count": 1}}
    assert hardware_gap({"cuda": True, "gpus": 2}, one_gpu, lease=("2", "3")) is None
    assert hardware_gap({"gpus": 3}, one_gpu, lease=("2", "3")) == (
        "needs 3 CUDA GPUs; the cell leased 2 CUDA GPUs (FTMATRIX_GPU_LEASE)"
    )
    assert hardware_gap({"gpus": 2}, {"gpu_count": 0}, lease=()) == (
        "needs 2 CUDA GPUs; this machine has no CUDA GPU"
    )
    # Without torch, the driver lists every GPU: CUDA_VISIBLE_DEVICES caps its count.
    driver_only = {"gpu_count": 4, "cuda_visible_devices": "2"}
    assert hardware_gap({"gpus": 2}, driver_only) == (
        "needs 2 CUDA GPUs; this machine has 1 CUDA GPU"
    )


VLLM_STARTUP = (
    "Free memory on device cuda:0 (7.34/79.19 GiB) on startup is less than desired GPU memory "
    "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
    "other processes."
)


def test_vllm_s_start_up_memory_check_is_oom(pytester: pytest.Pytester, tmp_path: Path):
    """vLLM raises it in the case's process (ValueError) or logs it from its engine's process."""
    pytester.makepyfile(
        test_vllm_memory=f"""
import subprocess, sys

def test_raised_here():
    raise ValueError({VLLM_STARTUP!r})

def test_raised_by_the_engine_process():
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write({VLLM_STARTUP!r})"])
    raise RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {{}}")

def test_an_engine_failure_for_another_cause():
    raise RuntimeError("Engine core initialization failed. See root cause above.")
"""
    )
    out = run_plugin(pytester, tmp_path)
    assert out["test_raised_here"]["status"] == "oom"
    assert out["test_raised_here"]["exception_type"] == "ValueError"
    assert out["test_raised_by_the_engine_process"]["status"] == "oom"
    assert out["test_an_engine_failure_for_another_cause"]["status"] == "error"


def test_a_distribution_installed_twice_is_recorded_as_import_finds_it(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two copies on sys.path (a user site, a system package): the first is what imports use."""
    folders = []
    for version in ("1.0", "2.0"):
        folder = tmp_path / f"path-{version}"
        info = folder / f"twice_installed-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: twice-installed\nVersion: {version}\n"
        )
        (folder / "twice_installed.py").write_text(f"VERSION = {version!r}\n")
        folders.append(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(folders))
    pytester.makepyfile(
        test_twice="""
import pytest

@pytest.mark.requires_packages(twice_installed=">=2")
def test_needs_the_second():
    pass

def test_imports_the_first():
    import twice_installed
    assert twice_installed.VERSION == "1.0"
"""
    )
    out = run_plugin(pytester, tmp_path)
    assert out["test_imports_the_first"]["status"] == "pass"
    assert out["test_imports_the_first"]["packages"]["twice-installed"] == "1.0"
    assert out["test_needs_the_second"]["status"] == "n/a"
    assert out["test_needs_the_second"]["reason"] == "twice_installed 1.0 is outside >=2"


def test_a_megabyte_message_is_recorded_fail_with_its_head_and_tail(
    pytester: pytest.Pytester, tmp_path: Path
):
    """Cleaning a message is linear: a 1 MB message without a space (0.07 s in plain
    pytest) once spent a case's whole limit in the plugin and was recorded ``timeout``."""
    pytester.makepyfile(
        test_cases="""
def test_huge_message():
    raise AssertionError("HEAD" + "E" * 2**20 + "TAIL")
"""
    )
    # Quadratic cleaning takes hours on this message: the test fails, never hangs the suite.
    huge = run_plugin(pytester, tmp_path, timeout=120)["test_huge_message"]
    assert huge["status"] == "fail"
    assert huge["message"].startswith("HEAD")
    for field in ("message", "traceback"):
        assert "HEAD" in huge[field]
        assert "TAIL" in huge[field]
        assert "characters cut ..." in huge[field]
        assert len(huge[field]) < 70_000


GATED_ISOLATED = """
import pytest

pytestmark = pytest.mark.isolated("patches a library on import")


@pytest.mark.requires_packages(no_such_distribution=">=1")
def test_needs_a_package():
    raise AssertionError("never runs")


@pytest.mark.requires_hardware(cuda=True)
def test_needs_a_gpu():
    raise AssertionError("never runs")


def test_runs():
    pass
"""


def test_an_isolated_case_its_gate_answers_starts_no_process_of_its_own(
    pytester: pytest.Pytester, tmp_path: Path
):
    """n/a and skip are decided from the cell's packages and the machine probe: the case
    is recorded by the cell's pytest, not handed to the supervisor for a process of its
    own (about 2 s each; nine per default cell). The record is the one that process wrote."""
    pytester.makepyfile(test_gated=GATED_ISOLATED)
    records = run_plugin(pytester, tmp_path)
    deferred = json.loads((tmp_path / "out.jsonl.isolated").read_text())
    assert [d.rsplit("/", 1)[-1] for d in deferred] == ["test_gated.py::test_runs"]
    assert {name: r["status"] for name, r in records.items()} == {
        "test_needs_a_package": "n/a",
        "test_needs_a_gpu": "skip",
    }
    # The same cases run alone, as the supervisor once ran them: the same records.
    alone = tmp_path / "alone"
    alone.mkdir()
    (tmp_path / "out.jsonl").rename(alone / "in-process.jsonl")
    for name in ("test_needs_a_package", "test_needs_a_gpu"):
        pytester.runpytest_subprocess(
            "-p", "ftmatrix.cell.plugin", "--ftmatrix-cell", str(tmp_path / "cell.json"),
            "--ftmatrix-record", str(alone / f"{name}.jsonl"), "--ftmatrix-alone",
            f"test_gated.py::{name}",
        )  # fmt: skip
        (by_itself,) = [json.loads(x) for x in (alone / f"{name}.jsonl").read_text().splitlines()]
        for field in ("status", "reason", "operation", "case", "message"):
            assert by_itself[field] == records[name][field], (name, field)


def test_the_case_api_is_one_module_and_the_plugins_old_names_still_work_and_warn():
    from ftmatrix.cell import api, plugin

    assert sorted(api.__all__) == sorted(
        ["MARKERS", "ChildProcessFailure", "GpuLease", "NotApplicable", "cpu_only_env",
         "gpu_lease", "not_applicable"]
    )  # fmt: skip
    for name in api.__all__:
        assert hasattr(api, name), name
    for name in (
        "ChildProcessFailure",
        "GpuLease",
        "NotApplicable",
        "cpu_only_env",
        "not_applicable",
    ):
        with pytest.warns(DeprecationWarning, match=f"import {name} from ftmatrix.cell.api"):
            assert getattr(plugin, name) is getattr(api, name)
    assert plugin.gpu_lease is api.gpu_lease  # the fixture, registered by the plugin
    with pytest.raises(AttributeError):
        plugin.no_such_name  # noqa: B018


def test_the_markers_are_registered_once_by_the_plugin_not_by_the_cases_folder():
    conftest = (Path(__file__).parent.parent / "cases" / "conftest.py").read_text()
    assert "MARKERS" not in conftest and "addinivalue_line" not in conftest


KEEPER_WITH_A_SIGNAL = """
import os, signal, subprocess, sys
if sys.argv[1] == "pending":  # a death sent to the keeper that it has not acted on yet
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    os.kill(os.getpid(), signal.SIGTERM)
env = {**os.environ, "FTMATRIX_KEEPER": str(os.getpid())}
env.pop("PYTEST_XDIST_WORKER", None)
ask = "from ftmatrix.cell.processes import keeper_dying; print(keeper_dying())"
sys.exit(subprocess.run([sys.executable, "-c", ask], env=env).returncode)
"""


@pytest.mark.parametrize(("keeper", "dying"), [("pending", "True"), ("alive", "False")])
def test_the_plugin_sees_a_death_sent_to_its_keeper_before_the_keeper_dies(keeper: str, dying: str):
    """A case that kills its parent is blamed, not the next case: the plugin reads the
    keeper's pending signals from /proc before it writes the case's record."""
    ran = subprocess.run(
        [sys.executable, "-c", KEEPER_WITH_A_SIGNAL, keeper],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout.strip() == dying, ran.stderr


GATED = """
import pytest

@pytest.mark.requires_packages(packaging=">=999")
def test_feature_missing():
    raise AssertionError("must not run")

def test_plain():
    pass
"""


def test_a_setting_that_blocks_a_part_of_the_plugin_by_name_is_not_obeyed(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """``-p no:ftmatrix-recorder`` ran the cases unrecorded; ``-p no:ftmatrix-gatekeeper``
    ran a case that is n/a, recorded as its failure (the cases' own addopts: a real cell in
    tests/test_blocked_plugin.py)."""
    block = "-p no:ftmatrix-recorder -p no:ftmatrix-gatekeeper -p no:ftmatrix-channel-guard"
    monkeypatch.setenv("PYTEST_ADDOPTS", block)
    pytester.makepyfile(test_gated=GATED)
    records = run_plugin(pytester, tmp_path)
    assert {name: r["status"] for name, r in records.items()} == {
        "test_feature_missing": "n/a",
        "test_plain": "pass",
    }

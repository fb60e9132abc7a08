"""Error signatures fold the incidental and keep the cause."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import make_record, run_plugin, write_records

from ftmatrix.cell.record import Record
from ftmatrix.cell.signature import (
    blame,
    clean_paths,
    compute_signature,
    innermost_framework_frame,
    normalise_message,
    root_of_traceback,
    unwrap_message,
)
from ftmatrix.report.failures import failure_groups
from ftmatrix.report.render import render_report
from ftmatrix.store import merge_outputs

pytest_plugins = ["pytester"]

# The four breaks DESIGN.md names, each seen with different sizes or devices.
VARIANTS = [
    (
        "a and b must have same reduction dim, but got [s0, 32000] X [4096, 32000].",
        "a and b must have same reduction dim, but got [s1, 32768] X [5120, 32768].",
    ),
    (
        "mat1 and mat2 shapes cannot be multiplied (2158x4096 and 1x8388608)",
        "mat1 and mat2 shapes cannot be multiplied (1003x2048 and 1x2097152)",
    ),
    (
        "The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0",
        "The size of tensor a (8) must match the size of tensor b (16) at non-singleton dimension 1",
    ),
    (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:1 and cuda:0!",
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cuda:3!",
    ),
]


def test_each_known_break_folds_to_one_signature():
    signatures = set()
    for first, second in VARIANTS:
        a = compute_signature("RuntimeError", first, "torch/_tensor.py:matmul")
        b = compute_signature("RuntimeError", second, "torch/_tensor.py:matmul")
        assert a == b
        signatures.add(a)
    assert len(signatures) == len(VARIANTS)


def test_type_and_frame_are_part_of_the_signature():
    message = VARIANTS[0][0]
    assert compute_signature("RuntimeError", message, "a.py:f") != compute_signature(
        "ValueError", message, "a.py:f"
    )
    assert compute_signature("RuntimeError", message, "a.py:f") != compute_signature(
        "RuntimeError", message, "b.py:f"
    )


def test_paths_and_addresses_fold():
    assert (
        normalise_message("cannot open /tmp/pytest-of-root/pytest-3/model/config.json at 0x7f3a2b")
        == "cannot open <path> at <addr>"
    )


def test_innermost_framework_frame_ignores_the_test_runner():
    files = [
        "/venv/lib/python3.11/site-packages/_pytest/python.py",
        "/repo/cases/test_sft.py",
        "/venv/lib/python3.11/site-packages/trl/trainer/sft_trainer.py",
        "/venv/lib/python3.11/site-packages/transformers/trainer.py",
        "/usr/lib/python3.11/json/decoder.py",
    ]
    functions = ["pyfunc_call", "test_sft", "__init__", "train", "decode"]
    assert innermost_framework_frame(files, functions) == "transformers/trainer.py:train"
    assert innermost_framework_frame(files[:2], functions[:2]) is None


# The two messages one break gave in the default matrix (peft 0.17.1, transformers 5.23.0),
# as the issue reported them: directly, and through trl's lazy import.
HYBRIDCACHE = (
    "cannot import name 'HybridCache' from 'transformers' "
    "(/tmp/a/.nox/matrix-cpu-py3-11-torch2-13-0-tf5-23-0-trl0-19-1-peft0-17-1-nounsloth"
    "/lib/python3.11/site-packages/transformers/__init__.py)"
)
HYBRIDCACHE_WRAPPED = (
    "Failed to import trl.trainer.sft_trainer because of the following error (look up to "
    "see its traceback):\ncannot import name 'HybridCache' from 'transformers' "
    "(/home/runner/work/x/.nox/matrix-cpu-py3-11-torch2-13-0-tf5-23-0-trl1-16-0-peft0-17-1-"
    "nounsloth/lib/python3.11/site-packages/transformers/__init__.py)"
)


def test_known_wrappers_unwrap_to_the_inner_message():
    inner = unwrap_message(HYBRIDCACHE_WRAPPED)
    assert inner.startswith("cannot import name 'HybridCache' from 'transformers' (")
    assert normalise_message(inner) == normalise_message(HYBRIDCACHE)
    assert unwrap_message("plain message") == "plain message"
    # A wrapper with nothing inside is not unwrapped to nothing.
    assert unwrap_message("Failed to import x because of the following error:") != ""


def test_machine_paths_become_placeholders_and_urls_stay():
    assert clean_paths(HYBRIDCACHE) == (
        "cannot import name 'HybridCache' from 'transformers' (<venv>/.../transformers/__init__.py)"
    )
    assert clean_paths(unwrap_message(HYBRIDCACHE_WRAPPED)) == clean_paths(HYBRIDCACHE)
    frames = (
        'File "/usr/lib/python3.11/importlib/__init__.py", line 126, in import_module\n'
        "../../../../tmp/a/.nox/m/lib/python3.11/site-packages/trl/trainer/sft_trainer.py:12: "
        "in <module>\n/work/wt/x/cases/test_sft.py:33: in test_sft\n"
        "see https://github.com/huggingface/peft/issues/3333 and /home/bob/models/x.bin\n"
        "<frozen importlib._bootstrap>:1204: in _gcd_import"
    )
    assert clean_paths(frames) == (
        'File "<python>/importlib/__init__.py", line 126, in import_module\n'
        "<venv>/.../trl/trainer/sft_trainer.py:12: in <module>\n"
        "<cases>/test_sft.py:33: in test_sft\n"
        "see https://github.com/huggingface/peft/issues/3333 and <path>/x.bin\n"
        "<frozen importlib._bootstrap>:1204: in _gcd_import"
    )


def test_blame_names_the_importer_and_the_provider_with_versions():
    packages = {"peft": "0.17.1", "transformers": "5.23.0", "trl": "1.16.0"}
    assert (
        blame(HYBRIDCACHE_WRAPPED, "peft/peft_model.py:<module>", packages)
        == "peft 0.17.1 imports HybridCache, which transformers 5.23.0 does not have"
    )
    assert (
        blame("module 'transformers' has no attribute 'HybridCache'", "trl/x.py:f", packages)
        == "trl 1.16.0 uses HybridCache, which transformers 5.23.0 does not have"
    )
    assert (
        blame("No module named 'vllm'", "trl/import_utils.py:f", packages)
        == "trl 1.16.0 imports vllm, which is not installed"
    )
    # A package missing a piece of itself, or no frame to name the importer: no blame.
    assert blame("cannot import name 'x' from 'peft.utils'", "peft/a.py:f", packages) is None
    assert blame(HYBRIDCACHE, None, packages) is None


# The structure of the break, in stand-ins under a folder named site-packages: peft's
# module imports a name its transformers lacks; trl's _LazyModule (its code and text
# copied from trl 1.16.0's _lazy_module.py) wraps the ImportError in a RuntimeError.
STAND_INS = {
    "transformers/__init__.py": "class Cache: ...\n",
    "peft/__init__.py": "from peft.peft_model import PeftModel\n",
    "peft/peft_model.py": "from transformers import Cache, HybridCache\nclass PeftModel: ...\n",
    "trl/__init__.py": (
        "import importlib\n"
        "def _get_module(module_name):\n"
        "    try:\n"
        "        return importlib.import_module('.' + module_name, 'trl')\n"
        "    except Exception as e:\n"
        "        raise RuntimeError(\n"
        "            f'Failed to import trl.{module_name} because of the following error '\n"
        "            f'(look up to see its traceback):\\n{e}'\n"
        "        ) from e\n"
        "def __getattr__(name):\n"
        "    return getattr(_get_module('trainer.sft_trainer'), name)\n"
    ),
    "trl/trainer/__init__.py": "",
    "trl/trainer/sft_trainer.py": "from peft import PeftModel\nclass SFTTrainer: ...\n",
}


CASES = """
import sys
sys.path.insert(0, {site!r})

def test_direct():
    from peft import PeftModel

def test_through_trl():
    from trl import SFTTrainer

def test_raised_while_handling():
    try:
        {{}}["key"]
    except KeyError:
        from peft import PeftModel
"""


def test_the_plugin_follows_the_chain_to_one_signature_blamed_on_peft(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for name, text in STAND_INS.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    pytester.makepyfile(test_cases=CASES.format(site=str(site)))
    records = run_plugin(pytester, tmp_path)
    direct, wrapped = records["test_direct"], records["test_through_trl"]
    assert wrapped["exception_type"] == "RuntimeError"
    assert wrapped["message"].startswith("Failed to import trl.trainer.sft_trainer")
    assert wrapped["root_exception_type"] == direct["root_exception_type"] == "ImportError"
    assert wrapped["root_frame"] == direct["root_frame"] == "peft/peft_model.py:<module>"
    assert (
        direct["signature"]
        == wrapped["signature"]
        == records["test_raised_while_handling"]["signature"]
    )
    assert direct["root_message"] == (
        "cannot import name 'HybridCache' from 'transformers' (<venv>/.../transformers/__init__.py)"
    )
    # The record keeps the raw text apart; what is published has no machine path.
    assert str(site) in wrapped["raw_traceback"]
    assert str(tmp_path) not in wrapped["traceback"]
    assert str(tmp_path) not in wrapped["message"] + direct["message"]
    groups = failure_groups([Record.from_mapping(r) for r in records.values()])
    assert len(groups) == 1 and len(groups[0].records) == 3
    assert groups[0].message == direct["root_message"]
    assert groups[0].blame == "peft imports HybridCache, which transformers does not have"


def test_a_child_s_traceback_text_gives_its_root_cause_and_frames():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/v/lib/python3.11/site-packages/trl/import_utils.py", line 144, in _get_module\n'
        "    return importlib.import_module(...)\n"
        '  File "/v/lib/python3.11/site-packages/peft/peft_model.py", line 37, in <module>\n'
        "    from transformers import Cache, HybridCache\n"
        "ImportError: cannot import name 'HybridCache' from 'transformers' (/v/x.py)\n"
        "\nThe above exception was the direct cause of the following exception:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/r/cases/_rank.py", line 9, in main\n'
        "    from trl import SFTTrainer\n"
        "RuntimeError: Failed to import trl.trainer.sft_trainer because of the following "
        "error (look up to see its traceback):\ncannot import name 'HybridCache'\n"
    )
    kind, frames = root_of_traceback(text)
    assert kind == "ImportError"
    assert innermost_framework_frame(*zip(*frames, strict=True)) == "peft/peft_model.py:<module>"
    # Raised while handling another error (not from it): the outer one is the root.
    handling = text.replace("direct cause of the following", "x").replace(
        "The above exception was the x exception:",
        "During handling of the above exception, another exception occurred:",
    )
    assert root_of_traceback(handling)[0] == "RuntimeError"
    assert root_of_traceback("no traceback") == (None, [])


# Records the results plugin wrote in the default matrix's two peft 0.17.1 x
# transformers 5.23.0 cells (trl 0.19.1 and 1.16.0): one per way the break showed
# (imported directly, through trl's lazy import, in a child process), as written, with
# this machine's paths in their raw text; tracebacks cut to their last 4,000 characters.
REAL = Path(__file__).parent / "data" / "hybridcache_records.jsonl"


def test_real_hybridcache_failures_form_one_group_blamed_on_peft(tmp_path: Path) -> None:
    from ftmatrix.known_issues import load_known_issues

    records = [Record.from_mapping(json.loads(line)) for line in REAL.read_text().splitlines()]
    assert {r.pins["trl"] for r in records} == {"0.19.1", "1.16.0"}
    assert len({r.exception_type for r in records}) > 1  # ImportError, RuntimeError, ...
    wrapped = [r for r in records if (r.message or "").startswith("Failed to import trl.")]
    assert wrapped, "a message through trl's lazy import"
    # Signed by the raised error, as before, they split; by the root cause, one group.
    assert len({compute_signature(r.exception_type or "", r.message or "", r.framework_frame)
                for r in records}) > 1  # fmt: skip
    known = load_known_issues(Path(__file__).parent.parent / "known_issues.yaml")
    (group,) = failure_groups(records, known)
    assert group.blame == "peft 0.17.1 imports HybridCache, which transformers 5.23.0 does not have"
    assert group.known is not None and group.known.id == "peft-hybridcache-removed"
    assert group.message == (
        "cannot import name 'HybridCache' from 'transformers' (<venv>/.../transformers/__init__.py)"
    )
    # Their raw text holds this machine's paths; nothing published does.
    raw = "\n".join(f"{r.raw_message}\n{r.raw_traceback}" for r in records)
    machine = set(re.findall(r"(/[^\s'\"()]+?)/lib/python3\.\d+/site-packages/", raw))
    assert machine
    write_records(tmp_path, *records)
    merge_outputs(tmp_path)
    render_report(tmp_path, now=datetime(2026, 11, 23, tzinfo=UTC))
    for name in ("index.html", "summary.md", "results.json"):
        text = (tmp_path / name).read_text()
        assert [p for p in machine if p in text] == [], name
        assert "peft 0.17.1 imports HybridCache" in text, name


# The fields ftmatrix writes itself in a checked format (ids, times, a status, a hash,
# numbers): the only ones a published record keeps as they are.
OWN_FIELDS = {
    "run_id", "cell_id", "lock_id", "status", "started_at", "finished_at", "reused_from",
    "signature", "schema", "duration", "flaky", "raw_message", "raw_traceback",
}  # fmt: skip


def test_a_published_record_holds_no_machine_path_in_any_field() -> None:
    """Every text of a record but its own formats is cleaned: a runner's label, the
    machine's import error, a local wheel's version and any field added later."""
    path = "/srv/zelda/work/lib/libtorch_global_deps.so"
    planted: dict[str, object] = {}
    for name, value in make_record().to_dict().items():
        if name in OWN_FIELDS:
            continue
        if isinstance(value, dict):
            planted[name] = {**value, path: path}
        elif isinstance(value, list):
            planted[name] = [path]
        elif isinstance(value, str) or value is None:
            planted[name] = f"{name} {path}"
        else:
            raise AssertionError(f"field {name!r} of a kind this test does not plant in")
    planted["attempts"] = [{"status": "crash", "message": path}]
    planted["hardware"] = {"import_error": f"OSError: {path}: cannot open", "gpus": [path]}
    record = Record.from_mapping({**make_record().to_dict(), **planted})
    text = json.dumps(record.published().to_dict())
    assert "zelda" not in text
    assert "libtorch_global_deps.so" in text  # the file's name stays


@pytest.mark.parametrize(
    "text",
    [
        "E" * 2**20,  # one run of path characters without a slash
        "=/" * 2**19,  # slashes a path may start at, everywhere
        "/site-packages" * 2**16,
        "x/lib/python3" * 2**16,
        "a=/b " * 2**18,
    ],
    ids=["no-slash", "slashes", "site-packages", "lib-python", "many-paths"],
)
def test_cleaning_a_megabyte_of_text_is_linear(text: str) -> None:
    """Once quadratic in a run of non-space text (16 kB: 3 s): a megabyte took hours.
    Linear, it takes well under a second; the subprocess's limit only stops a hang."""
    script = (
        "import sys; from ftmatrix.cell.signature import clean_paths; clean_paths(sys.stdin.read())"
    )
    subprocess.run([sys.executable, "-c", script], input=text, text=True, check=True, timeout=60)


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        # every entry of a PATH-like list, not the first only
        ("PYTHONPATH=/opt/zelda/src:/srv/zelda/lib:/data/zelda/x", "PYTHONPATH=<path>/src:<path>/lib:<path>/x"),
        # a space inside a path, quoted or not
        ('File "/srv/ci zelda/work dir/case.py", line 3', 'File "<path>/case.py", line 3'),
        ("/srv/ci zelda/work/test_x.py:12: AssertionError", "<path>/test_x.py:12: AssertionError"),
        # a home folder's owner, wherever the path ends
        ("cwd /home/zelda done", "cwd ~ done"),
        ("~zelda/proj/x.py", "<path>/x.py"),
        ("/Users/zelda", "~"),
        ("C:\\Users\\zelda\\proj\\x.py", "~\\proj\\x.py"),
        # file:// URLs are paths
        ("see file:///home/zelda/proj/report.html", "see file:<path>/report.html"),
        ("FILE://localhost/srv/zelda/b.txt", "file:<path>/b.txt"),
        # ... and a file:// URL's host
        ("file://zelda-pc/share/zelda/r.html", "file:<path>/r.html"),
        # Windows paths as repr() and JSON print them (backslashes doubled), and UNC paths
        ('{"p": "C:\\\\Users\\\\zelda\\\\x.py"}', '{"p": "~\\\\x.py"}'),
        ("'D:\\\\ci\\\\zelda\\\\x.py'", "'<path>/x.py'"),
        ("\\\\zelda-nas\\share\\zelda\\x.py", "<path>/x.py"),
        # a home folder's owner after ../ or at a path's end, and percent-encoded paths
        ("../../../home/zelda", "<path>/..~"),
        ("GET /open?f=%2Fhome%2Fzelda%2Fx.py", "GET /open?f=~%2Fx.py"),
        ("q=%2fsrv%2fzelda%2fx.py&y=1", "q=<path>%2Fx.py&y=1"),
        # after an escape a repr() prints (a newline, a tab, a NUL, a unicode escape)
        ("'built\\n/srv/zelda/model.bin'", "'built\\n<path>/model.bin'"),
        ("'a\\t/home/zelda/x'", "'a\\t~/x'"),
        ("b'\\x00/srv/zelda/x'", "b'\\x00<path>/x'"),
        ("\\u2028/srv/zelda/x", "\\u2028<path>/x"),
        # glued to a one-letter option, a terminal's colour code, an encoded ":"
        ("gcc -I/srv/zelda/include -L/opt/zelda/lib -lfoo", "gcc -I<path>/include -L<path>/lib -lfoo"),
        ("\x1b[1m/srv/zelda/out.log\x1b[0m", "<path>/out.log"),
        ("u=file%3A%2F%2F%2Fsrv%2Fzelda%2Fdata.bin", "u=file%3A<path>%2Fdata.bin"),
        ("u=file%3a%2f%2fhome%2fzelda%2fx", "u=file%3a~%2fx"),
        # after the "-" that joins a parametrize id's values (pytest's case id)
        ("t.py::test_load[1-/home/zelda/data]", "t.py::test_load[1-~/data]"),
        ("t.py::test_load[bf16-/srv/zelda/model.bin-2]", "t.py::test_load[bf16-<path>/model.bin-2]"),
        ("t.py::t[<redacted:HF_TOKEN>-/srv/zelda/x]", "t.py::t[<redacted:HF_TOKEN>-<path>/x]"),
        ("t.py::test_load[x-C:\\Users\\zelda\\x.py]", "t.py::test_load[x-~\\x.py]"),
        ("t.py::test_load[x-D:\\ci\\zelda\\x.py]", "t.py::test_load[x-<path>/x.py]"),
    ],
)  # fmt: skip
def test_every_machine_path_loses_its_folders(text: str, cleaned: str) -> None:
    assert clean_paths(text) == cleaned
    assert "zelda" not in clean_paths(text)


@pytest.mark.parametrize(
    "text",
    [
        "https://github.com/o/r/blob/main/x.py and http://localhost:8080/simple/x/",
        "ratio 3/4/5 and a/b/c, time 12:30:01",
        "see https://example.com/home/about or www.example.org/Users/list",
    ],
)
def test_what_is_not_a_machine_path_stays(text: str) -> None:
    assert clean_paths(text) == text


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        # two paths a space parts are two paths: the first file's name stays
        ("mv /srv/zelda/in.bin /srv/zelda/out.bin failed", "mv <path>/in.bin <path>/out.bin failed"),
        ("cp ~/zelda/a.txt ~/zelda/b.txt", "cp <path>/a.txt <path>/b.txt"),
        # an option after a path is not part of it
        ("gcc -I{ROOT}/include -L{ROOT}/lib -lfoo", "gcc -I{ROOT}/include -L{ROOT}/lib -lfoo"),
        ("run /srv/zelda/x.py -o /srv/zelda/y.json", "run <path>/x.py -o <path>/y.json"),
        # a slash with a blank after it starts no path
        ("loss=2.0 / lr=/3", "loss=2.0 / lr=/3"),
        ("a / b/c / d", "a / b/c / d"),
    ],
)  # fmt: skip
def test_cleaning_keeps_what_is_not_one_path(text: str, cleaned: str) -> None:
    """Cleaning must not swallow a result's text: two paths stay two, prose stays."""
    assert clean_paths(text) == cleaned

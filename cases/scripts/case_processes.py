"""Processes a case starts: a training script on the cell's GPU lease, a server beside it.

Imported by the case files (by path: see ``load_case_processes`` there), never run.
A script started here reports as cases/scripts/sft_distributed.py does: a JSON
report on success, and on an exception ``rank<N>.error.json`` written by that
script's ``report_error`` (type, message, innermost frame, who is to blame). The
case turns that file back into an exception of the child's type, so the record's
exception type, message and blame are the child's, and known issues match.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

# The variable the runner names the cell's leased GPUs in (comma-separated indices).
LEASE_VARIABLE = "FTMATRIX_GPU_LEASE"
REPORT = "report.json"


def leased_gpus(env: Mapping[str, str]) -> list[str] | None:
    """The GPUs leased to the cell, else those this process was shown; None: not restricted."""
    value = env.get(LEASE_VARIABLE, env.get("CUDA_VISIBLE_DEVICES"))
    if value is None:
        return None
    return [device.strip() for device in value.split(",") if device.strip()]


def lease_env(env: Mapping[str, str], devices: Sequence[str] | None = None) -> dict[str, str]:
    """``env`` for a child that must see ``devices`` (default: the whole lease)."""
    child = dict(env)
    shown = leased_gpus(env) if devices is None else list(devices)
    if shown is not None:
        child["CUDA_VISIBLE_DEVICES"] = ",".join(shown)
    child.setdefault("OMP_NUM_THREADS", "1")
    return child


def run_script(
    command: Sequence[str], out: Path, *, env: Mapping[str, str], timeout: float = 900
) -> dict[str, Any]:
    """Run ``command`` (a script writing into ``out``) and return its report.

    A child that raised is re-raised here with its exception type and message
    (:func:`child_failure`); one that died without a word is reported with how.
    """
    out.mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(
        list(command), capture_output=True, text=True, timeout=timeout, env=dict(env), check=False
    )
    report = out / REPORT
    if completed.returncode == 0 and report.exists():
        result: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
        return result
    raise_child_failure(child_failure(out, completed.returncode, completed.stderr))


def child_failure(out: Path, returncode: int, stderr: str) -> BaseException:
    """The exception a failed child leaves in ``out``, as an exception of the same type."""
    errors = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.error.json"))]
    tail = stderr[-4000:]
    if not errors:
        how = _how_it_died(returncode)
        message = f"the child {how} without reporting an error\n{tail}"
        crashed = how.removeprefix("died of ") if returncode < 0 else None
        carried = _plugin_failure(
            exception_type=None, message=message, frames=(), traceback=tail, crashed=crashed
        )
        return carried or RuntimeError(message)
    first = errors[0]
    type_name = str(first["type"]).removeprefix("builtins.")
    frame = str(first.get("frame") or "")
    carried = _plugin_failure(
        exception_type=type_name,
        message=str(first["message"]),
        frames=[(frame, "")] if frame else (),
        traceback=tail,
        crashed=None,
    )
    if carried is not None:
        return carried
    error = same_type_error(type_name, str(first["message"]))
    error.child_frame = frame  # type: ignore[attr-defined]
    return error


def raise_child_failure(error: BaseException) -> NoReturn:
    """Raise ``error`` from the child's innermost frame when the plugin cannot carry frames.

    The results plugin blames by the innermost frame (a framework's file: ``fail``;
    ours: ``error``); raising from code compiled under the child's file name gives it
    the frame the child's exception had, so the blame is the same as in-process.
    """
    frame = getattr(error, "child_frame", "")
    if frame:
        exec(compile("raise error", frame, "exec"), {"error": error})
    raise error


def same_type_error(type_name: str, message: str) -> BaseException:
    """An exception whose type has the child's name: a builtin as itself, others rebuilt."""
    module, _, name = type_name.rpartition(".")
    builtin = getattr(builtins, name, None) if not module else None
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        return builtin(message)
    rebuilt = type(name, (Exception,), {"__module__": module or "builtins", "__qualname__": name})
    return rebuilt(message)


def _plugin_failure(**fields: Any) -> BaseException | None:
    # The results plugin's own carrier for a child's error, where this ftmatrix has one:
    # it keeps the child's frames, so blame (fail or error) is decided as in-process.
    try:
        from ftmatrix.pytest_plugin import ChildProcessFailure  # type: ignore[attr-defined]
    except ImportError:
        return None
    try:
        failure: BaseException = ChildProcessFailure(**fields)
    except TypeError:  # another ftmatrix's carrier, with other fields: keep the type name
        return None
    return failure


def _how_it_died(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"died of signal {signal.Signals(-returncode).name}"
    return f"exited {returncode}"


@contextlib.contextmanager
def serving(
    command: Sequence[str], *, env: Mapping[str, str], stop_timeout: float = 60.0
) -> Iterator[subprocess.Popen[bytes]]:
    """A server process for the body of the ``with``; stopped after it, whatever happened.

    The body's result stands: a failure in the body is re-raised as it was, and a
    problem stopping the server after it is only logged. After a clean body, a
    server that does not stop is killed; only a failure to stop even then is raised.
    """
    server = subprocess.Popen(list(command), env=dict(env))
    try:
        yield server
    except BaseException:
        stop_server(server, timeout=stop_timeout, quietly=True)
        raise
    stop_server(server, timeout=stop_timeout, quietly=False)


def stop_server(server: subprocess.Popen[bytes], *, timeout: float, quietly: bool) -> None:
    """Terminate ``server``; kill it if it outlives ``timeout`` seconds."""
    try:
        server.terminate()
        try:
            server.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            server.kill()  # a server that ignores SIGTERM must not outlive the case
            server.wait(timeout=timeout)
    except Exception as problem:
        if not quietly:
            raise
        print(f"stopping the server after the case failed: {problem!r}", file=sys.stderr)


def write_report(out_dir: str, report: Mapping[str, Any]) -> None:
    """For a child script: leave its result where :func:`run_script` reads it."""
    Path(out_dir, REPORT).write_text(json.dumps(dict(report)), encoding="utf-8")

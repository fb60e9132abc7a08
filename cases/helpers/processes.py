"""Processes a case starts (training ranks, a launcher, a server), both sides of their protocol.

A child script writes ``rank<N>.json`` (:func:`write_report`) into the folder the case
gives it, or, when it raises, ``rank<N>.error.json`` (:func:`report_error`: the exception's
type, message, frames and traceback). The case runs the command with the environment the
``gpu_lease`` fixture computes (``gpu_lease.child_env()``, or ``cpu_only_env()`` for a
CPU case) and reads the reports back (:func:`run_ranks`); a failed child becomes the
case's :class:`ChildProcessFailure`, so the record's exception type, message, blame and
signature are the child's, and known issues match as in-process. A child that died of
a signal is a ``crash``. :func:`serving` keeps a server beside the case.

Imported as ``helpers.processes`` by the cases (cases/ is on their path) and by the scripts
in cases/scripts/, which put cases/ on theirs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ftmatrix.cell.api import ChildProcessFailure, not_applicable

# trl's trainers (1.x, e.g. trl/trainer/sft_trainer.py) refuse DataParallel with a
# ValueError naming `accelerate launch`: the release does not offer that launch mode.
DATAPARALLEL_REFUSAL = "does not support `nn.DataParallel`"
# torchrun's (and so accelerate's) summary of a rank that died: "exitcode  : -9 (pid: 7)".
RANK_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+)")
# The rank that failed first, in the same summary: the launcher then ends its peers with
# SIGTERM and lists them under "Failures", so theirs is not how the run ended.
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?exitcode\s*:\s*(-?\d+)", re.S)
TIMEOUT_SECONDS = 900


def launch_command(mode: str, processes: int, script: Sequence[str]) -> list[str]:
    """The command line that starts ``script`` (and its arguments) under ``mode``.

    ``mode``: ``accelerate`` (accelerate launch), ``torchrun``, or ``python`` (one
    process that sees every visible GPU: transformers then uses DataParallel).
    """
    if mode == "accelerate":
        # accelerate's torchrun launcher (--multi_gpu) starts the processes; with no
        # CUDA the script asks for the CPU and accelerate joins them with gloo.
        # (`--cpu` alone runs one process unless MPI is set up.)
        return [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            *("--num_processes", str(processes), "--num_machines", "1"),
            *("--mixed_precision", "no", "--dynamo_backend", "no"),
            # A free port of its own: accelerate takes 29500 unless it finds it taken at the
            # moment it looks, so two launches a moment apart (cells side by side, or
            # another run on the machine) shared one store, and when the first ended the
            # second's ranks aborted ("terminate called without an active exception").
            *("--main_process_port", str(free_port())),
            *script,
        ]
    if mode == "torchrun":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",  # a free rendezvous port: cells on one machine run side by side
            *("--nproc_per_node", str(processes)),
            *script,
        ]
    return [sys.executable, *script]


def free_port() -> int:
    """A TCP port no one listens on now, for a launch's rendezvous on this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_ranks(
    command: Sequence[str],
    out: Path,
    *,
    env: Mapping[str, str],
    timeout: float = TIMEOUT_SECONDS,
) -> list[dict[str, Any]]:
    """Run ``command``, whose processes report into ``out``; their reports, by rank.

    A failed run raises what its first failed rank raised (:func:`raise_rank_failure`).
    """
    out.mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**env, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    if completed.returncode != 0:
        raise_rank_failure(out, completed.returncode, completed.stderr)
    reports = [p for p in out.glob("rank*.json") if not p.name.endswith(".error.json")]
    return [json.loads(p.read_text()) for p in sorted(reports, key=_by_rank)]


def raise_rank_failure(out: Path, returncode: int, stderr: str) -> NoReturn:
    """Raise what the first failed rank raised; a rank that left no error and died of a
    signal is a crash; a run that only exited non-zero is ours (``error``)."""
    errors = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.error.json"), key=_by_rank)]
    tail = stderr[-4000:]
    if errors:
        first = errors[0]
        if first["type"] == "ValueError" and DATAPARALLEL_REFUSAL in first["message"]:
            not_applicable(first["message"])
        raise ChildProcessFailure(
            exception_type=first["type"],
            message=first["message"],
            frames=[(file, function) for file, function in first["frames"]],
            traceback=f"{first['traceback']}\n{tail}",
        )
    died = died_how(returncode, stderr)
    if died is not None:
        raise ChildProcessFailure(message=died, crashed=died, traceback=tail)
    raise RuntimeError(f"the launch exited {returncode} and no rank left its error\n{tail}")


def died_how(returncode: int, stderr: str) -> str | None:
    """``a training process died: signal SIGKILL``, or None if none died of a signal.

    The signal is the launched process's own (a negative return code) or, under a
    launcher, the one its summary names for the rank that died first: a rank that exits
    non-zero gets its peers SIGTERM from the launcher, which is no crash of theirs.
    """
    root = ROOT_CAUSE.search(stderr)
    ranks = [root.group(1)] if root else RANK_EXITCODE.findall(stderr)
    codes = [returncode, *(int(c) for c in ranks)]
    signals = [-code for code in codes if code < 0]
    if not signals:
        return None
    try:
        name = signal.Signals(signals[0]).name
    except ValueError:
        name = str(signals[0])
    return f"a training process died: signal {name}"


def _by_rank(path: Path) -> tuple[int, str]:
    return len(path.name), path.name


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


# The child's side ----------------------------------------------------------------------


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def write_report(out_dir: str, report: Mapping[str, Any]) -> None:
    """Leave this process's result (``rank<N>.json``) where :func:`run_ranks` reads it."""
    Path(out_dir, f"rank{_rank()}.json").write_text(json.dumps(dict(report)))


def report_error(out_dir: str, error: BaseException) -> None:
    """Leave this process's exception for the case, as the results plugin would record it.

    Type (named as the plugin names it: ``RuntimeError``, ``torch.OutOfMemoryError``),
    message, every frame (file, function) and the formatted traceback: the case
    raises them again, so the record blames and signs the child's own exception.
    """
    frames = traceback.extract_tb(error.__traceback__)
    module, name = type(error).__module__, type(error).__qualname__
    Path(out_dir, f"rank{_rank()}.error.json").write_text(
        json.dumps(
            {
                "type": name if module == "builtins" else f"{module}.{name}",
                "message": str(error),
                "frames": [[f.filename, f.name] for f in frames],
                "traceback": "".join(
                    traceback.format_exception(type(error), error, error.__traceback__)
                ),
            }
        )
    )


def run_reporting_errors(out_dir: str, body: Callable[[], None]) -> None:
    """Run ``body`` (a child script's work); if it raises, leave the exception for the
    case and raise it on, so the process still exits non-zero. After a clean ``body``,
    the process group it joined is destroyed (:func:`destroy_process_group`)."""
    try:
        body()
    except Exception as error:
        report_error(out_dir, error)
        raise
    destroy_process_group()


def destroy_process_group() -> None:
    """Destroy torch.distributed's process group, if this process joined one.

    torch asks every process to do so before it exits (its docs, "Shutdown"). A rank
    that left it to the interpreter's exit died of SIGABRT ("terminate called without
    an active exception") one run in three to six on a busy machine: a gloo worker
    thread, freeing its last work's tensors during finalization, takes the GIL and is
    ended by Python inside a noexcept destructor (pytorch/pytorch#190489). Only after
    a clean run: destroying the group while a peer still waits in a collective can
    hang it (pytorch/torchtitan#1342); a failed rank exits without it.
    """
    # A process that never imported torch.distributed has no group (nor, maybe, torch).
    dist: Any = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()

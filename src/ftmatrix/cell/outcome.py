"""How a case's outcome becomes exactly one status: the classification of failures.

A case that raised is judged by whom to blame, which decides between ``fail`` and
``error``: an assertion in the case (a wrong result) or an exception raised inside a
framework package is the frameworks' ``fail``; any other exception raised by our own
case code is our ``error``. Running out of memory is ``oom`` wherever it was raised; a
child process that died without raising is a ``crash``. A case that did not raise
passed, or was skipped: ``n/a`` when it called ``not_applicable``, else ``skip``.

The results plugin (:mod:`ftmatrix.cell.plugin`) observes each case and asks here.
Imports: the standard library and the cell package's own modules.
"""

from __future__ import annotations

import sysconfig
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PureWindowsPath

from ftmatrix.cell.api import ChildProcessFailure, NotApplicable
from ftmatrix.cell.signature import framework_module, root_of_traceback
from ftmatrix.cell.status import Status

# vLLM's start-up check of free GPU memory (vllm/v1/worker/gpu_worker.py, and in
# vllm/utils/mem_utils.py later): a ValueError, but the device is out of memory.
VLLM_STARTUP_MEMORY = "is less than desired GPU memory utilization"
# What vLLM's LLM raises when its engine process (which logged the cause) failed to start.
VLLM_ENGINE_FAILED = "Engine core initialization failed"


@dataclass(frozen=True, kw_only=True)
class Failure:
    """An exception as a record tells it: raised in the case's process or in a child of it."""

    exception_type: str
    message: str
    filenames: tuple[str, ...]  # the traceback's frames, outermost first
    functions: tuple[str, ...]
    traceback: str | None
    memory_error: bool = False  # a MemoryError (or subclass) in this process
    # An AssertionError or subclass (the cases' ContractError): a check that did not hold.
    assertion: bool = False
    causes: str = ""  # the messages of the exceptions it was raised from
    # The root cause: the innermost exception it came from (itself when none).
    root_type: str = ""
    root_message: str = ""
    root_filenames: tuple[str, ...] = ()
    root_functions: tuple[str, ...] = ()
    crashed: str | None = None  # how a child process died, when it did not raise

    @classmethod
    def from_exception(
        cls, error: BaseException, tb: types.TracebackType | None, longrepr: str | None
    ) -> Failure:
        """The failure a case raised; a :class:`ChildProcessFailure` tells its child's."""
        if isinstance(error, ChildProcessFailure):
            # The child's chain is known by its text only: its traceback's sections.
            root_type, root_frames = root_of_traceback(_first_traceback(error))
            return cls(
                root_type=root_type or error.exception_type or "",
                root_filenames=tuple(f for f, _ in root_frames),
                root_functions=tuple(f for _, f in root_frames),
                exception_type=error.exception_type or "",
                message=error.message,
                root_message=error.message,
                filenames=tuple(f for f, _ in error.frames),
                functions=tuple(f for _, f in error.frames),
                traceback="\n".join(t for t in (error.child_traceback, longrepr) if t) or None,
                crashed=error.crashed,
                assertion=(error.exception_type or "").rsplit(".", 1)[-1] == "AssertionError",
            )
        filenames, functions = _frames(tb)
        root = _root_cause(error)
        root_filenames, root_functions = (
            (filenames, functions) if root is error else _frames(root.__traceback__)
        )
        return cls(
            root_type=_qualified_name(type(root)),
            root_message=text_of(root),
            root_filenames=tuple(root_filenames),
            root_functions=tuple(root_functions),
            exception_type=_qualified_name(type(error)),
            message=text_of(error),
            filenames=tuple(filenames),
            functions=tuple(functions),
            traceback=longrepr,
            memory_error=isinstance(error, MemoryError),
            assertion=isinstance(error, AssertionError),
            causes="\n".join(text_of(e) for e in _causes(error)),
        )


def case_status(
    failure: Failure | None, skip: BaseException | None, output: str = ""
) -> tuple[Status, str | None]:
    """The one status of a case, and the reason that goes with it (None where none does).

    ``failure``: the first exception its phases raised; ``skip``: the skip exception one
    raised instead; ``output``: what the case printed (see :func:`classify_failure`).
    """
    if failure is not None:
        if failure.crashed is not None:
            return Status.CRASH, failure.crashed
        return classify_failure(failure, output), None
    if skip is not None:
        status = Status.NOT_APPLICABLE if isinstance(skip, NotApplicable) else Status.SKIP
        return status, text_of(getattr(skip, "msg", skip))
    return Status.PASS, None


def classify_failure(failure: Failure, output: str = "") -> Status:
    """``fail`` when the frameworks are to blame, ``oom`` for memory, else our ``error``.

    ``output``: what the case printed, where a framework's child process may have
    logged the cause of the exception the case saw.
    """
    name = failure.exception_type.rsplit(".", 1)[-1]
    if _out_of_memory(failure, name, output):
        return Status.OOM
    origin = _innermost_origin(failure.filenames)
    if origin == "framework":
        return Status.FAIL
    if origin == "case" and failure.assertion:
        return Status.FAIL  # our check of the frameworks' result did not hold
    return Status.ERROR


def _out_of_memory(failure: Failure, name: str, output: str) -> bool:
    if failure.memory_error or name in ("MemoryError", "OutOfMemoryError"):
        return True
    if "CUDA out of memory" in failure.message:
        return True
    if VLLM_STARTUP_MEMORY in failure.message or VLLM_STARTUP_MEMORY in failure.causes:
        return True
    # vLLM's LLM saw its engine's process fail; that process printed the cause.
    return VLLM_ENGINE_FAILED in failure.message and VLLM_STARTUP_MEMORY in output


def text_of(value: object, show: Callable[[object], str] = str) -> str:
    """``show(value)`` (``str`` or ``repr``), or what stands in for it where that raises or
    is no string: a case's exception or metric is any object, and its text must never cost
    the verdict (a ``__str__`` that raises would end pytest with an internal error)."""
    try:
        text = show(value)
        if isinstance(text, str):
            return str.__str__(text)  # a subclass's own __str__ is the case's code again
    except Exception as exc:  # any error of the case's own code
        said = f"raised {type(exc).__name__}"
    else:
        said = "gave no string"
    return f"<{_qualified_name(type(value))}: its {show.__name__}() {said}>"


def _first_traceback(error: ChildProcessFailure) -> str:
    """The child's own traceback, without the output appended after it (which may hold
    other processes' tracebacks): up to the line that names its exception."""
    text = error.child_traceback or ""
    first = (error.message or "").strip().splitlines()[:1]
    marker = f"{error.exception_type}: {first[0]}" if first else None
    end = text.find(marker) if marker else -1
    return text[: end + len(marker)] if marker and end >= 0 else text


def _root_cause(error: BaseException) -> BaseException:
    """The innermost exception ``error`` came from.

    An explicit ``__cause__`` (``raise ... from``) is always followed. An implicit
    ``__context__`` only where the outer message repeats the inner one (a wrapper
    that raised without ``from``): otherwise the outer error is a new one raised
    while handling the inner (``from transformers import X`` raises ImportError in
    the context of the lazy module's AttributeError), and the outer says more.
    """
    current, seen = error, {id(error)}
    while True:
        inner = current.__cause__
        context = current.__context__
        if inner is None and context is not None and not current.__suppress_context__:
            said = text_of(context)
            inner = context if said and said in text_of(current) else None
        if inner is None or id(inner) in seen:
            return current
        seen.add(id(inner))
        current = inner


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen = {id(error)}
    current = error.__cause__ or error.__context__
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _innermost_origin(filenames: Sequence[str]) -> str | None:
    """Where the deepest frame that is neither stdlib nor the test runner lies.

    'framework' (an installed package), 'case' (our code) or None (no such frame).
    """
    stdlib = sysconfig.get_paths()["stdlib"]
    origin = None
    for filename in filenames:
        if framework_module(filename) is not None:
            origin = "framework"
        elif filename.startswith((stdlib, "<")) or _is_runner_file(filename):
            continue  # the standard library and frozen import machinery blame nobody
        elif _is_compiled_extension_file(filename):
            continue  # blame whoever called into it (pyarrow's array.pxi under trl's packing)
        else:
            origin = "case"
    return origin


def _is_compiled_extension_file(filename: str) -> bool:
    """A Cython module's frame: its source named relative to the package ("pyarrow/array.pxi").

    Every Python file a case or a framework runs is named by its absolute path.
    """
    return not filename.startswith("/") and not PureWindowsPath(filename).is_absolute()


def _is_runner_file(filename: str) -> bool:
    return any(part in filename for part in ("/_pytest/", "/pluggy/", "/site-packages/pytest/"))


def _frames(tb: types.TracebackType | None) -> tuple[list[str], list[str]]:
    filenames, functions = [], []
    for frame in _walk(tb):
        filenames.append(frame.f_code.co_filename)
        functions.append(frame.f_code.co_name)
    return filenames, functions


def _walk(tb: types.TracebackType | None) -> Iterator[types.FrameType]:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _qualified_name(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"

"""What a case author uses, all of it, from this one module: the markers,
``not_applicable``, a child process's failure, the GPU lease (the type and the
``gpu_lease`` fixture) and a CPU case's environment.

Cases import from here (``from ftmatrix.cell.api import not_applicable``); the results
plugin (:mod:`ftmatrix.cell.plugin`) interprets them and registers the markers and the
fixture. Importing these names from the plugin, as cases written against earlier releases
do, still works and warns (DeprecationWarning). Imports: the standard library and pytest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

from ftmatrix.cell.gpu_lease import leased_devices

__all__ = [
    "MARKERS",
    "ChildProcessFailure",
    "GpuLease",
    "NotApplicable",
    "cpu_only_env",
    "gpu_lease",
    "not_applicable",
]

# The case markers, registered by the results plugin (a cell's pytest always loads it;
# by hand: ``pytest -p ftmatrix.cell.plugin cases/``).
MARKERS = (
    "operation(name): the operation family this case reproduces (sft, grpo, lora, ...)",
    "requires_packages(**specifiers): PEP 440 specifier per distribution; outside it the "
    "case is n/a (the versions do not have the feature)",
    "requires_hardware(cuda=False, gpus=0, min_compute_capability=None): what the machine "
    "must have; without it the case is skipped (gpus=N counts the cell's GPU lease, which "
    "the gpu_lease fixture hands to the processes a case starts)",
    "exclusive(reason): the case must not share the machine (it starts several processes, "
    "or takes every GPU); with pytest-xdist workers it runs alone, after the others",
    "isolated(reason): the case runs in a pytest process of its own, after the others (it "
    "patches libraries on import, or leaves global state or GPU memory behind)",
)


class NotApplicable(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """Raised to record ``n/a``: this version set does not have the feature."""


def not_applicable(reason: str) -> None:
    """Stop the running case and record it as ``n/a`` with ``reason``."""
    raise NotApplicable(msg=reason, pytrace=False)


class ChildProcessFailure(Exception):
    """A process the case started (a training rank, a launcher) failed: record the child's error.

    The case's record then carries the child's exception type, message, frames and
    traceback, blamed as if raised in the case's own process; ``crashed`` (how the
    child died, e.g. ``signal SIGKILL``) makes it a ``crash`` instead.
    """

    def __init__(
        self,
        *,
        exception_type: str | None = None,
        message: str,
        frames: Sequence[tuple[str, str]] = (),
        traceback: str | None = None,
        crashed: str | None = None,
    ) -> None:
        super().__init__(message)
        self.exception_type = exception_type
        self.message = message
        self.frames = tuple(frames)
        self.child_traceback = traceback
        self.crashed = crashed


@dataclass(frozen=True, kw_only=True)
class GpuLease:
    """The GPUs the cell leased; an in-process case sees only the first of them.

    ``devices`` is None when no runner leased any (pytest started by hand): the
    children then see what this process sees.
    """

    devices: tuple[str, ...] | None

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for processes the case starts: every leased GPU visible."""
        env = dict(os.environ if base is None else base)
        if self.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.devices)
        return env

    def only(self, index: int) -> GpuLease:
        """The lease's ``index``-th GPU alone: for a process beside the case's own, such as
        a server on the second GPU while the case trains on the first.

        Without a runner's lease, the GPUs this process was shown stand for it.
        """
        devices = self.devices
        if devices is None:
            shown = os.environ.get("CUDA_VISIBLE_DEVICES")
            devices = tuple(shown.split(",")) if shown else tuple(map(str, range(index + 1)))
        return GpuLease(devices=devices[index : index + 1])


def cpu_only_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for processes of a CPU case: no GPU visible, whatever the runner has."""
    return {**(os.environ if base is None else base), "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture
def gpu_lease() -> GpuLease:
    """The cell's whole GPU lease, for a case that declares ``gpus=N`` and starts its processes."""
    return GpuLease(devices=leased_devices(os.environ))

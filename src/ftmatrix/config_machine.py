"""matrix.yaml's keys about the machine: hardware classes, timeouts and limits."""

from __future__ import annotations

import re
from typing import Any

from ftmatrix.config_checker import Checker
from ftmatrix.matrix_model import (
    HARDWARE_KEYS,
    LIMIT_KEYS,
    MAX_WORKERS,
    PLAIN_NAME_RULE,
    TIMEOUT_KEYS,
    HardwareClass,
    Limits,
    Timeouts,
    is_plain_name,
)
from ftmatrix.versions import shown


def hardware_classes(checker: Checker, raw: Any) -> tuple[HardwareClass, ...]:
    if not isinstance(raw, dict) or not raw:
        checker.add("hardware", f"must be a non-empty mapping of class -> settings, got {raw!r}")
        return ()
    classes = []
    for name, given in raw.items():
        if not is_plain_name(name):
            checker.add(
                f"hardware[{shown(name)}]",
                f"{shown(name)} is not a hardware class name: a class's name is {PLAIN_NAME_RULE}",
            )
            continue
        at = f"hardware.{name}"
        settings = {} if given is None else given
        if not isinstance(settings, dict):
            checker.add(at, f"must be a mapping with 'runs-on' and 'gpus', got {settings!r}")
            continue
        checker.unknown_keys(settings, HARDWARE_KEYS, at)
        runs_on = settings.get("runs-on", [])
        if isinstance(runs_on, str):
            runs_on = [runs_on]
        if not isinstance(runs_on, list) or not all(isinstance(x, str) for x in runs_on):
            checker.add(f"{at}.runs-on", f"must be a list of runner labels, got {runs_on!r}")
            runs_on = []
        gpus = settings.get("gpus", 0)
        valid_gpus = isinstance(gpus, int) and not isinstance(gpus, bool) and 0 <= gpus <= MAX_GPUS
        if not valid_gpus:
            checker.add(
                f"{at}.gpus",
                f"must be a whole number from 0 to {MAX_GPUS} (GPUs of one machine), "
                f"got {shown(gpus)}",
            )
            gpus = 0
        # Judged against gpus only where gpus itself was valid: one problem, said once.
        gpu_name = _gpu_name(checker, settings.get("gpu-name"), at, gpus if valid_gpus else None)
        classes.append(
            HardwareClass(name=str(name), runs_on=tuple(runs_on), gpus=gpus, gpu_name=gpu_name)
        )
    return tuple(classes)


def _gpu_name(checker: Checker, raw: Any, at: str, gpus: int | None) -> str | None:
    if raw is None:
        return None
    where = f"{at}.gpu-name"
    if not isinstance(raw, str) or not raw.strip():
        checker.add(where, f"must be a pattern of GPU names such as 'H100|H200', got {raw!r}")
        return None
    try:
        re.compile(raw)
    except re.error as error:
        checker.add(where, f"is not a regular expression ({error}): {raw!r}")
        return None
    if gpus is not None and gpus < 1:
        checker.add(where, "names the GPUs of a class with gpus: 0; give gpus: 1 or more")
        return None
    return raw


def timeouts(checker: Checker, raw: Any) -> Timeouts:
    if not isinstance(raw, dict):
        checker.add("timeouts", f"must be a mapping such as {{case: 600, cell: 3600}}, got {raw!r}")
        return Timeouts()
    checker.unknown_keys(raw, TIMEOUT_KEYS, "timeouts")
    values: dict[str, float] = {}
    for key in TIMEOUT_KEYS:
        if key not in raw:
            continue
        value = raw[key]
        # NaN passes "<= 0" and no clock reaches infinity: both would never end a case.
        if not _number_within(value, MIN_TIMEOUT, MAX_TIMEOUT):
            checker.add(
                f"timeouts.{key}",
                f"must be a number of seconds from {MIN_TIMEOUT} to {MAX_TIMEOUT:,} (30 days), "
                f"got {shown(value)}",
            )
            continue
        values[key] = float(value)
    return Timeouts(**values)


# The largest numbers a matrix may give: past them a value is a typo (or .inf), and
# the clock and the memory limit cannot hold it (an OverflowError, a wait that never ends).
MAX_TIMEOUT = 30 * 24 * 3600
MAX_MEMORY_GIB = 1 << 20
# The smallest: below them nothing can run, so every case would be a timeout or an oom
# that says nothing of a framework. A case's timeout is watched four times a second and
# a pytest starts in about one; a Python running pytest and the results plugin holds
# between 31 and 46 MiB (measured: a case of 1.5 s is an oom at 0.03 GiB, passes at 0.045).
MIN_TIMEOUT = 1
MIN_MEMORY_GIB = 1 / 16
# More GPUs than any one machine has: a typo (a cell leases its GPUs on one machine).
MAX_GPUS = 64


def _number_within(value: Any, least: float, most: float) -> bool:
    """Is ``value`` a number (not a bool) with least <= value <= most? False for NaN."""
    return not isinstance(value, bool) and isinstance(value, int | float) and least <= value <= most


def limits(checker: Checker, raw: Any) -> Limits:
    if not isinstance(raw, dict):
        checker.add(
            "limits", f"must be a mapping such as {{memory-gib: 16, workers: 2}}, got {raw!r}"
        )
        return Limits()
    checker.unknown_keys(raw, LIMIT_KEYS, "limits")
    values: dict[str, Any] = {}
    memory = raw.get("memory-gib")
    if memory is not None:
        if not _number_within(memory, MIN_MEMORY_GIB, MAX_MEMORY_GIB):
            checker.add(
                "limits.memory-gib",
                f"must be a number of GiB from {MIN_MEMORY_GIB} (64 MiB) to "
                f"{MAX_MEMORY_GIB:,}, got {shown(memory)}",
            )
        else:
            values["memory_gib"] = float(memory)
    for key, default in (("workers", 1), ("cells", "auto")):
        count = raw.get(key, default)
        # bool is no count; past MAX_WORKERS, each would be a process of its own
        if count == "auto" or (type(count) is int and 1 <= count <= MAX_WORKERS):
            values[key] = count
        else:
            checker.add(
                f"limits.{key}",
                f"must be a whole number from 1 to {MAX_WORKERS} or 'auto' (one per CPU), "
                f"got {count!r}",
            )
    return Limits(**values)

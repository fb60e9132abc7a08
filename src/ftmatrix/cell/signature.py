"""Error signatures: the same break seen in many cells folds to one short hash.

A signature is the exception type, the message with its incidental details
folded (numbers, sizes, addresses, paths, device ordinals, quoted names of
temporary files), and the innermost traceback frame that lies inside a
framework package, hashed. It is taken from the root cause: the innermost
exception of the chain (``__cause__``, wrapping ``__context__``) and the
innermost message of the well-known wrappers (trl's lazy import), so one break
seen through a wrapper and without it is one group.

Paths of the machine that ran a cell are replaced by placeholders
(``<venv>/.../transformers/__init__.py``): published text shows no machine's
layout, and equal causes on different runners read the same.
Runs inside cells: standard library only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

# Order matters: paths and addresses before bare numbers.
_FOLDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+-]+){2,}/?"), "<path>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"\b(cuda|xpu|mps|npu):\d+\b"), r"\1:<n>"),
    (re.compile(r"\bs\d+\b"), "<sym>"),  # torch.compile symbolic sizes: s0, s1
    (re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def normalise_message(message: str) -> str:
    """Fold what varies between occurrences of the same break into placeholders."""
    text = message.strip().splitlines()[0] if message.strip() else ""
    for pattern, replacement in _FOLDS:
        text = pattern.sub(replacement, text)
    return text.strip()


# Wrappers that re-raise an import's error with its text inside their own: trl's
# _LazyModule._get_module (0.x and 1.x), and transformers' before 4.5x. What
# follows the marker is the wrapped exception's message.
_WRAPPERS = (
    re.compile(
        r"^Failed to import [\w.]+ because of the following error"
        r"(?: \(look up to see its traceback\))?:\s*",
    ),
)


def unwrap_message(message: str) -> str:
    """The innermost message inside known wrappers' text ("Failed to import X because ...")."""
    text = message.strip()
    while True:
        for wrapper in _WRAPPERS:
            match = wrapper.match(text)
            if match and text[match.end() :].strip():
                text = text[match.end() :].strip()
                break
        else:
            return text


# A machine's paths, most specific first. A home folder loses its owner's name
# (``/home/alice`` -> ``~``); installed packages keep their path inside the environment;
# the standard library and the cases keep theirs below a name; any other absolute (or
# ../-relative) path keeps its last part only. A path starts after a ``:`` too (each
# entry of a PATH-like list), after an escape a ``repr()`` prints (``'a\\n/srv/x'``) and
# after a one-letter option glued to it (``-I/srv/x``, ``-L/srv/x``), but never with
# ``//`` (a URL's host) nor with a blank after its first slash (``a / b``); it runs over a
# space where the next word goes on with a ``/`` ("/home/a b/x.py") but does not start a
# path or an option of its own (``mv /a/x /a/y``: two paths); ``file://`` URLs are paths
# (their host goes too). Windows paths count with their backslashes doubled (a
# ``repr()``, JSON) and as UNC paths (``\\\\server\\share``); a path percent-encoded
# (``%2Fhome%2F``, and after an encoded ``:``, ``file%3A%2F%2F%2Fsrv``) loses its folders
# as well. A terminal's colour codes are taken out first: they glue a path to a letter.
# Every pattern starts only where a run of path characters starts (the lookbehinds)
# and has no nested repetition: each is tried once per run, so cleaning is linear in
# the text's length (a megabyte message without a space included).
_PATH_CHARS = r"[^\s'\"()<>\[\],:;{}]"
_RUN_START = rf"(?<!{_PATH_CHARS})"
_NAME_CHARS = r"[^/\\\s'\"()<>\[\],:;]"
# Where a path may start besides after a character that no word holds: after an escape
# a repr() prints, and after a one-letter option (``-I``) that a blank or a quote starts.
_ESCAPED = r"(?<=\\[ntrvfab0])|(?<=\\x[0-9a-fA-F]{2})|(?<=\\u[0-9a-fA-F]{4})"
# And after the "-" pytest joins a parametrize id's values with (``test[1-/srv/x]``).
_ID_JOINED = r"(?<=[^\s/\\-]-)"
_GLUED = rf"{_ESCAPED}|(?<=(?<![\w-])-[A-Za-z])|{_ID_JOINED}"
# A text holding none of these holds no path any pattern below could find.
_PATH_MARKS = ("/", "\\", "~", "%", "\x1b")
# After a blank, what starts a path or an option of its own, not the next word of one
# with a blank in it ("/srv/ci runner/x", "/home/alice -smith/x"): a "/" or a "~", a
# one- or two-letter option glued to a path (``-I/srv/x``).
_NOT_NEW = r"(?![/~]|-[A-Za-z]{1,2}/)"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FILE_URL = re.compile(r"\bfile://[^/\s'\"<>]*(?=/)", re.IGNORECASE)
_ENCODED = r"[^\s%/&?#=;'\"<>]"  # a character of a percent-encoded path's part
_ENCODED_START = r"(?:(?<![\w%])|(?<=%3A))"  # a run's start, or an encoded ":"
_CLEAN: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(rf"{_ENCODED_START}(?:%2F)+(?:home|Users)%2F{_ENCODED}+", re.IGNORECASE),
        "~",
    ),
    (re.compile(rf"{_ENCODED_START}(?:%2F)+(?:{_ENCODED}+%2F)+", re.IGNORECASE), "<path>%2F"),
    (
        re.compile(
            rf"(?:(?<![\w-])|{_GLUED})"
            r"(?:/(?:home|Users|export/home|var/home)/|[A-Za-z]:\\+Users\\+"
            rf"|~(?=[A-Za-z_])){_NAME_CHARS}+(?: {_NOT_NEW}{_NAME_CHARS}+(?=[/\\]))*"
        ),
        "~",
    ),
    (re.compile(rf"{_RUN_START}{_PATH_CHARS}*?/(?:site|dist)-packages/"), "<venv>/.../"),
    (re.compile(rf"{_RUN_START}{_PATH_CHARS}*?/lib/python\d+(?:\.\d+)?/"), "<python>/"),
    (re.compile(rf"{_RUN_START}{_PATH_CHARS}*?/cases/(?={_PATH_CHARS})"), "<cases>/"),
    (re.compile(rf"(?:(?<![\w.-])|{_ID_JOINED})[A-Za-z]:\\+(?:[^\\\s'\"<>]+\\+)+"), "<path>/"),
    (re.compile(r"(?<![\w.\\-])\\{2,}(?:[^\\\s'\"<>]+\\+)+"), "<path>/"),  # UNC
    (
        # Greedy up to the run's last slash that a path character follows.
        re.compile(
            rf"(?:(?<![\w/.<>-])|{_GLUED})(?:/(?![/\s])|(?:\.\./)+|~/)"
            rf"(?:{_PATH_CHARS}| (?={_NOT_NEW}{_PATH_CHARS}*/))*/(?={_PATH_CHARS})"
        ),
        "<path>/",
    ),
)


def clean_paths(text: str) -> str:
    """``text`` with the running machine's paths replaced by placeholders.

    ``/tmp/x/.nox/matrix-.../lib/python3.11/site-packages/transformers/__init__.py``
    becomes ``<venv>/.../transformers/__init__.py``; URLs other than ``file://`` are
    left alone.
    """
    if not any(mark in text for mark in _PATH_MARKS):  # a version, a name: most texts
        return text
    text = _FILE_URL.sub("file:", _ANSI.sub("", text))
    for pattern, replacement in _CLEAN:
        text = pattern.sub(replacement, text)
    return text


def clean_paths_in(value: Any) -> Any:
    """``value`` (JSON-like: a bisect finding, a record's mapping) with :func:`clean_paths`
    applied to every text, its mappings' keys too (a metric's name may be a path)."""
    if isinstance(value, str):
        return clean_paths(value)
    if isinstance(value, Mapping):
        return {clean_paths_in(key): clean_paths_in(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_paths_in(item) for item in value]
    return value


def innermost_framework_frame(
    filenames: Iterable[str], function_names: Iterable[str]
) -> str | None:
    """``package/module.py:function`` of the deepest frame inside an installed package."""
    found = None
    for filename, function in zip(filenames, function_names, strict=True):
        module = framework_module(filename)
        if module is not None:
            found = f"{module}:{function}"
    return found


def compute_signature(exception_type: str, message: str, framework_frame: str | None) -> str:
    """A 12-character hash; equal for the same break whatever the sizes or devices."""
    key = "\n".join([exception_type, normalise_message(message), framework_frame or ""])
    # A lone surrogate (a message built from undecodable bytes) hashes as its escape.
    return hashlib.sha256(key.encode("utf-8", "backslashreplace")).hexdigest()[:12]


# The test runner's own frames wrap every case; they never locate a break.
_RUNNER_PACKAGES = ("_pytest/", "pytest/", "pluggy/", "ftmatrix/")


def framework_module(filename: str) -> str | None:
    """``trl/trainer/sft_trainer.py`` for a file of an installed package, else None.

    The test runner's own packages are not frameworks: they wrap every case.
    """
    normalised = filename.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in normalised:
            module = normalised.rsplit(marker, 1)[1]
            return None if module.startswith(_RUNNER_PACKAGES) else module
    return None


# Breaks whose message names the missing piece and whose innermost framework frame
# names the importer: "cannot import name 'X' from 'pkg'" raised in peft's module.
_MISSING_NAME = re.compile(r"cannot import name '([\w.]+)' from '([\w.]+)'")
_MISSING_ATTRIBUTE = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def blame(
    root_message: str | None, root_frame: str | None, packages: Mapping[str, str]
) -> str | None:
    """Who breaks whom, where the trace shows it, with the installed versions.

    "peft 0.17.1 imports HybridCache, which transformers 5.23.0 does not have": the
    importer is the package of the innermost framework frame, the provider the module
    the message names. None when the message or the frame does not say.
    """
    if not root_message or not root_frame:
        return None
    importer = root_frame.split("/", 1)[0]
    text = unwrap_message(root_message)
    if match := _MISSING_NAME.search(text):
        name, provider, verb = match[1], match[2], "imports"
    elif match := _MISSING_ATTRIBUTE.search(text):
        provider, name, verb = match[1], match[2], "uses"
    elif match := _MISSING_MODULE.search(text):
        module = match[1]
        provider, name, verb = module.split(".", 1)[0], module, "imports"
        if "." not in module:
            if _top(provider) == _top(importer):
                return None
            return f"{_named(importer, packages)} imports {module}, which is not installed"
    else:
        return None
    provider_top = provider.split(".", 1)[0]
    if _top(provider_top) == _top(importer):
        return None  # a package missing a piece of itself names nobody else
    return (
        f"{_named(importer, packages)} {verb} {name}, "
        f"which {_named(provider_top, packages)} does not have"
    )


def _top(name: str) -> str:
    return name.lower().replace("_", "-")


def _named(module: str, packages: Mapping[str, str]) -> str:
    """``peft 0.17.1``: an import name with its distribution's installed version."""
    versions = {_top(k): v for k, v in packages.items()}
    version = versions.get(_top(module))
    return f"{module} {version}" if version else module


_DIRECT_CAUSE = "\nThe above exception was the direct cause of the following exception:\n"
_DURING_HANDLING = "\nDuring handling of the above exception, another exception occurred:\n"
_FRAME_LINE = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)', re.MULTILINE)
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)", re.MULTILINE)


def root_of_traceback(text: str) -> tuple[str | None, list[tuple[str, str]]]:
    """The root cause's type and frames (file, function; outermost first) in a Python
    traceback as text (a child process's): the innermost section reached from the last
    one through "direct cause" links (``raise ... from``), as the in-process chain is
    followed through ``__cause__``."""
    sections: list[str] = []
    links: list[str] = []
    rest = text
    while True:
        cut = min(
            ((rest.find(m), m) for m in (_DIRECT_CAUSE, _DURING_HANDLING) if m in rest),
            default=None,
        )
        if cut is None:
            sections.append(rest)
            break
        sections.append(rest[: cut[0]])
        links.append(cut[1])
        rest = rest[cut[0] + len(cut[1]) :]
    at = len(sections) - 1
    while at > 0 and links[at - 1] == _DIRECT_CAUSE:
        at -= 1
    section = sections[at]
    frames = [(m[1], m[2]) for m in _FRAME_LINE.finditer(section)]
    last_frame = max((m.end() for m in _FRAME_LINE.finditer(section)), default=0)
    kind = _EXCEPTION_LINE.search(section, last_frame)
    return (kind[1] if kind else None), frames

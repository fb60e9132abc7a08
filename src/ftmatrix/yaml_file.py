"""Reading a YAML file a user wrote (matrix.yaml, known_issues.yaml), strictly and safely.

Whatever the file holds, the answer is data or one ConfigError naming the file, the
line and what is wrong, never a traceback:

- not UTF-8, a folder, unreadable: said so;
- a key written twice in one mapping: refused with both lines (YAML would silently
  keep the last one, and a matrix would quietly test other versions than written);
- more values than any matrix holds (counted as they are read, so a flow list of
  millions never fills the memory), nesting deeper than any matrix needs, aliases that
  expand past a bound (the "billion laughs") or an alias inside the value it names:
  refused before anything is built from them;
- a value that reads as a date, a number or another tagged kind but is none (2024-02-30,
  !!float abc), a number YAML 1.1 reads as another (010 is 8, 1:30 is 90) or a character
  YAML does not allow (NUL, other control codes): its line;
- merge keys (``<<: *base``) merge, as YAML defines them; keys written after them win.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ftmatrix.errors import ConfigError
from ftmatrix.user_files import MB, read_user_bytes

MAX_DEPTH = 32  # a matrix nests five or six levels; deeper is no matrix
MAX_NODES = 100_000  # scalars, lists and mappings after every alias is expanded
MAX_INT_DIGITS = 4300  # Python's int() refuses more (sys.get_int_max_str_digits)
MAX_BYTES = 10 * MB  # the default matrix and its known issues are a few tens of kB


class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys, deep nesting and alias bombs."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.composed = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        self.composed += 1
        try:
            if self.composed > MAX_NODES:  # counted as they come: 4M values took 3 GB, 100 s
                raise _Refused(
                    f"holds more than {MAX_NODES:,} values; a matrix holds a few hundred",
                    self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
            if self.depth > MAX_DEPTH:
                raise _Refused(
                    f"nested more than {MAX_DEPTH} levels deep",
                    self.peek_event().start_mark,  # type: ignore[no-untyped-call]
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            expanded_size(node, {})
        return node

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError) as exc:
            # PyYAML's own constructors fail this way on a value their tag cannot hold
            raise _Refused(_not_of_its_kind(node, exc), node.start_mark) from None

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                if key in first_line:
                    raise _Refused(
                        f"the key {key!r} is written twice in one mapping (lines "
                        f"{first_line[key]} and {line}); YAML would keep only the last",
                        key_node.start_mark,
                    )
                first_line[key] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Any) -> Any:
        written = str(node.value).replace("_", "").lstrip("+-")
        if node.style is None and _MISREAD_INT.fullmatch(written):
            # YAML 1.1 reads 010 as 8 and 1:30 as 90: a timeout quietly other than written
            base = "base 60" if ":" in written else "octal"
            value = super().construct_yaml_int(node)
            raise _Refused(
                f"{node.value} reads as {value} ({base}, as YAML 1.1 reads it); write the "
                "number without a leading 0 or ':'",
                node.start_mark,
            )
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            digits = len(str(node.value))
            if digits <= MAX_INT_DIGITS:
                raise  # no number at all (!!int abc): said as such by construct_object
            problem = f"a number of {digits:,} digits; no setting takes one"
            raise _Refused(problem, node.start_mark) from None


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)

MERGE_TAG = "tag:yaml.org,2002:merge"
_MISREAD_INT = re.compile(r"0[0-7]+|[1-9][0-9]*(:[0-5]?[0-9])+")
_KINDS = {"timestamp": "a date", "float": "a number", "int": "a number", "bool": "true or false"}


def _not_of_its_kind(node: Any, exc: Exception) -> str:
    kind = str(node.tag).rsplit(":", 1)[-1]
    value = repr(node.value) if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
    value = value if len(value) <= 60 else f"{value[:57]}..."
    # datetime says which part of a date is wrong; other messages are PyYAML's insides
    why = f" ({exc})" if kind == "timestamp" and isinstance(exc, ValueError) else ""
    reads_as = _KINDS.get(kind, f"!!{kind}")
    return f"{value} reads as {reads_as} but is not one{why}; quote it if it is text"


_EXPANDING = -1  # in sizes: a node whose size is being counted


def expanded_size(node: Any, sizes: dict[int, int]) -> int:
    """How many nodes ``node`` stands for once every alias is expanded; refuses too many,
    and an alias inside the value it names (``&a [*a]``), which never ends."""
    known = sizes.get(id(node))
    if known == _EXPANDING:
        raise _Refused(
            "an alias stands inside the value it names, which would never end",
            node.start_mark,
        )
    if known is not None:
        return known
    sizes[id(node)] = _EXPANDING
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [part for pair in node.value for part in pair]
    else:
        children = []
    size = 1 + sum(expanded_size(child, sizes) for child in children)
    if size > MAX_NODES:
        raise _Refused(
            f"expands to more than {MAX_NODES:,} values (aliases repeated within aliases)",
            node.start_mark,
        )
    sizes[id(node)] = size
    return size


def parse_yaml(text: str, *, source: str) -> Any:
    """The data of YAML ``text``, or a ConfigError at ``source:line:column``."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        line, column = before.count("\n") + 1, len(before) - before.rfind("\n")
        raise ConfigError(
            [
                f"{source}:{line}:{column}: invalid YAML: the character U+{exc.character:04X} "
                "is not allowed in YAML text (control characters other than tab and line "
                "breaks, U+FFFE, U+FFFF); remove it"
            ]
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}: invalid YAML: {problem}"]) from None


def _problem(line: str) -> ConfigError:
    return ConfigError([line])


def read_yaml_text(path: Path) -> str:
    """The text of ``path``, or a ConfigError saying why it cannot be one."""
    try:
        data = read_user_bytes(
            str(path), str(path), limit=MAX_BYTES, kind="a YAML file of ours", error=_problem
        )
        return data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a folder; give the YAML file inside it"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [
                f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                f"{exc.start}); save the file as UTF-8"
            ]
        ) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot be read: {exc.strerror or exc}"]) from None

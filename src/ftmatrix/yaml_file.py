"""Reading a YAML file a user wrote (matrix.yaml, known_issues.yaml), strictly and safely.

Whatever the file holds, the answer is data or one ConfigError naming the file, the
line and what is wrong, never a traceback:

- not UTF-8, a folder, unreadable: said so;
- a key written twice in one mapping: refused with both lines (YAML would silently
  keep the last one, and a matrix would quietly test other versions than written);
- nesting deeper than any matrix needs, or aliases that expand past a bound (the
  "billion laughs"): refused before anything is built from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ftmatrix.errors import ConfigError
from ftmatrix.user_files import MB, read_user_bytes

MAX_DEPTH = 32  # a matrix nests five or six levels; deeper is no matrix
MAX_NODES = 100_000  # scalars, lists and mappings after every alias is expanded
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

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
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

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
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
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # more digits than Python converts (4,300)
            digits = len(str(node.value))
            problem = f"a number of {digits:,} digits; no setting takes one"
            raise _Refused(problem, node.start_mark) from None


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def expanded_size(node: Any, sizes: dict[int, int]) -> int:
    """How many nodes ``node`` stands for once every alias is expanded; refuses too many."""
    known = sizes.get(id(node))
    if known is not None:
        return known
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

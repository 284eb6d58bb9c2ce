"""YAML read from parser events into values tagged with lines, with duplicate checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)

from wloadctl.core.plan import JOB_ID_MAX

Entry = tuple[Any, int, str | None]
"""A YAML node as (value, 1-based line, source text).

`value` is a dict of key text -> Entry for a mapping, a list of Entry for a
sequence, or the resolved scalar (str, int, float, bool or None). `text` is the
scalar exactly as written (so `06:30` stays a time and `[sleep, 5]` stays argv
text), and None for collections. A mapping value carries the line of its key.
"""

YamlEvent: TypeAlias = Any
"""A PyYAML parser event. Its fields (value, anchor, tag, marks) live on the
subclasses and the marks are always set by the parser, which the type stubs
cannot say; the readers test the class and read the fields directly."""

Report = Callable[[int, str, str | None], None]
"""Receives (line, message, hint) for each problem found while reading."""

ALIAS_NODES = 1_000_000
"""Nodes that aliases may stand for in a plan, beyond ten for each character of the file read so far."""


class AliasBomb(Exception):
    """Aliases stand for more nodes than a plan can mean (the "billion laughs").

    Each alias is read as the one node it names, so the reader stays small,
    but whatever later walks the values (variables written to the journal,
    a job's env) sees every copy. Reading stops at the first alias past the
    bound; `line` is that alias's line.
    """

    def __init__(self, line: int, anchor: str, nodes: int) -> None:
        super().__init__(f"YAML aliases stand for more than {nodes:,} nodes (at alias '*{anchor}')")
        self.line = line
        """1-based line of the alias that went past the bound."""
        self.message = str(self)
        """The one-line message."""


def line_of(ev: YamlEvent) -> int:
    """The 1-based line where an event's node starts."""
    line: int = ev.start_mark.line + 1
    return line


_LoaderBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class PlanLoader(_LoaderBase):
    """The YAML loader for plans: libyaml's C parser when present, else PyYAML's own.

    Only its event stream is used. Building Python objects through PyYAML's
    constructor costs about ten times the parse itself at a million jobs, and
    loses the line of every node; reading events keeps both speed and lines.
    """


_TAG = "tag:yaml.org,2002:"
_RESOLVERS: dict[str, list[tuple[str, Any]]] = dict(
    yaml.resolver.Resolver.yaml_implicit_resolvers
)
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_BOOLS: dict[str, bool] = dict(yaml.constructor.SafeConstructor.bool_values)
_COLLECTION_TAGS = frozenset({None, "!", _TAG + "map", _TAG + "seq"})


def _typed(tag: str, text: str) -> Any:
    """The value of scalar `text` under a core tag; ValueError when it does not fit."""
    if tag == _TAG + "null":
        return None
    if tag == _TAG + "bool":
        return _BOOLS[text.lower()]
    node = yaml.ScalarNode(tag, text)
    if tag == _TAG + "int":
        return _CONSTRUCTOR.construct_yaml_int(node)
    if tag == _TAG + "float":
        return _CONSTRUCTOR.construct_yaml_float(node)
    # Dates, merge and value markers stay text: plans treat them as names.
    return text


def resolve_plain(text: str) -> Any:
    """Resolve an unquoted scalar as YAML 1.1 (and PyYAML) does, but dates stay text.

    Args:
        text: the scalar as written.

    Returns:
        None, a bool, an int, a float, or `text` itself.
    """
    rules = _RESOLVERS.get(text[:1])
    if rules is None:
        return text
    for tag, regexp in rules:
        if regexp.match(text):
            try:
                return _typed(tag, text)
            except (ValueError, KeyError, TypeError):
                return text
    return text


def describe(value: Any) -> str:
    """Name the YAML type of a value for messages ("a mapping", "the number 5")."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    text = str(value)
    if len(text) > 80:
        text = f"{text[:60]}...({len(text)} characters)"
    return f"the text '{text}'"


def plain_value(entry: Entry, _done: dict[int, Any] | None = None) -> Any:
    """Strip the lines from an entry, giving plain Python data (for plan variables).

    An alias gives the same object as its anchor, as PyYAML does: nested
    aliases (the "billion laughs") stay small instead of growing exponentially.
    """
    done = {} if _done is None else _done
    value = entry[0]
    if not isinstance(value, dict | list):
        return value
    found = done.get(id(entry))
    if found is not None:
        return found
    if isinstance(value, dict):
        out: Any = {}
        done[id(entry)] = out
        for key, item in value.items():
            out[key] = plain_value(item, done)
    else:
        out = []
        done[id(entry)] = out
        out.extend(plain_value(item, done) for item in value)
    return out


class TreeReader:
    """Turns a YAML event stream into Entry values, reporting what YAML lets pass.

    PyYAML keeps the last of two equal keys without a word; this reader reports
    both lines. It also resolves aliases and `<<` merge keys, and refuses tags
    it does not know. Parser errors (bad syntax) are left to the caller.
    """

    def __init__(self, data: Any, report: Report) -> None:
        """Parse `data` (text, bytes or a binary file); problems go to `report`."""
        self.loader = PlanLoader(data)
        """The parser; only its `get_event` is used."""
        self.next: Callable[[], YamlEvent] = self.loader.get_event
        """Returns the next parser event."""
        self.anchors: dict[str, Entry] = {}
        """Entries by anchor name, for aliases."""
        self.report = report
        self.broken_lines: set[int] = set()
        """Lines of nodes this reader could not read (an alias of no anchor, or of the node it is in; a tag plans
        do not take): what they were to give is not there, so a check of it would only say so again."""
        self.open: set[str] = set()
        """Anchors of the collections being read (an alias of one is inside the node it names)."""
        """Where problems go."""
        self.sizes: dict[int, int] = {}
        """Nodes each anchored entry stands for, by id (the entries stay alive in `kept`)."""
        self.kept: list[Entry] = []
        """Every anchored entry, so that the ids in `sizes` stay theirs."""
        self.expanded = 0
        """Nodes the aliases read so far stand for, counting every copy."""

    def close(self) -> None:
        """Free the parser's buffers."""
        self.loader.dispose()

    def root(self) -> YamlEvent | None:
        """Skip to the first node of the document; None when the stream has none."""
        ev = self.next()
        if isinstance(ev, StreamStartEvent):
            ev = self.next()
        if isinstance(ev, StreamEndEvent) or ev is None:
            return None
        if isinstance(ev, DocumentStartEvent):
            return self.next()
        return ev

    def finish(self) -> None:
        """Read to the end of the stream, reporting any second document."""
        ev = self.next()
        if isinstance(ev, DocumentEndEvent):
            ev = self.next()
        if isinstance(ev, DocumentStartEvent):
            self.report(
                line_of(ev),
                "a plan file holds one YAML document, but a second one starts here",
                "remove the '---' line, or split the plans into separate files",
            )

    def node(self, ev: YamlEvent) -> Entry:
        """Read the node that starts with `ev` (and every event inside it)."""
        kind = type(ev)
        if kind is ScalarEvent:
            text = ev.value
            if ev.implicit[0]:
                entry = (resolve_plain(text), line_of(ev), text)
            elif ev.tag is None or ev.tag == "!":
                entry = (text, line_of(ev), text)
            else:
                entry = self._tagged(ev)
        elif kind is MappingStartEvent or kind is SequenceStartEvent:
            opened = ev.anchor is not None and ev.anchor not in self.open
            if opened:
                self.open.add(ev.anchor)
            try:
                entry = self.mapping(ev) if kind is MappingStartEvent else self.sequence(ev)
            finally:
                if opened:
                    self.open.discard(ev.anchor)
        elif kind is AliasEvent:
            found = self.anchors.get(ev.anchor)
            if found is None:
                line = line_of(ev)
                self.broken_lines.add(line)
                if ev.anchor in self.open:
                    self.report(line, f"alias '*{ev.anchor}' is inside the node its anchor '&{ev.anchor}' names: "
                                "a node cannot hold itself", "copy what it should hold instead")
                else:
                    self.report(line, f"alias '*{ev.anchor}' names no anchor", "define '&name' first")
                return (None, line, "")
            self._count_alias(ev, found)
            return found
        else:
            raise yaml.YAMLError(f"unexpected {kind.__name__} in the YAML stream")
        if ev.anchor is not None:
            self.anchors[ev.anchor] = entry
            if entry[2] is None:
                self.sizes[id(entry)] = self._size(entry)
                self.kept.append(entry)
        return entry

    def _size(self, entry: Entry) -> int:
        """Nodes an entry stands for, every alias inside it expanded (anchored ones are looked up)."""
        value = entry[0]
        if type(value) is list:
            items: Any = value
        elif type(value) is dict:
            items = value.values()
        else:
            return 1
        sizes = self.sizes
        total = 1
        for item in items:
            if item[2] is not None:
                total += 1
                continue
            known = sizes.get(id(item))
            total += known if known is not None else self._size(item)
        return total

    def _count_alias(self, ev: YamlEvent, found: Entry) -> None:
        """Add what an alias stands for to the count; AliasBomb past the bound."""
        if found[2] is not None:
            self.expanded += 1
            return
        size = self.sizes.get(id(found))
        self.expanded += size if size is not None else self._size(found)
        bound = ALIAS_NODES + 10 * ev.start_mark.index
        if self.expanded > bound:
            raise AliasBomb(line_of(ev), ev.anchor, bound)

    def _tagged(self, ev: YamlEvent) -> Entry:
        """A scalar with an explicit tag such as `!!str 007`."""
        line = line_of(ev)
        tag, text = ev.tag, ev.value
        if tag == _TAG + "str":
            return (text, line, text)
        if tag in (_TAG + "int", _TAG + "float", _TAG + "bool", _TAG + "null"):
            try:
                return (_typed(tag, text), line, text)
            except (ValueError, KeyError, TypeError):
                short = tag.removeprefix(_TAG)
                self.report(line, f"'{text}' is not a valid !!{short}", None)
                return (text, line, text)
        self.broken_lines.add(line)
        self.report(
            line,
            f"unsupported YAML tag '{tag}'",
            "plans use !!str, !!int, !!float, !!bool",
        )
        return (text, line, text)

    def sequence(self, start: YamlEvent) -> Entry:
        """Read a sequence whose start event is `start`."""
        self._check_tag(start)
        items: list[Entry] = []
        append = items.append
        node = self.node
        next_event = self.next
        while True:
            ev = next_event()
            if type(ev) is SequenceEndEvent:
                return (items, line_of(start), None)
            append(node(ev))

    def mapping(self, start: YamlEvent) -> Entry:
        """Read a mapping whose start event is `start`, reporting duplicate keys."""
        self._check_tag(start)
        out: dict[str, Entry] = {}
        merges: list[Entry] = []
        for key, line, plain, value in self.items(start):
            if plain and key == "<<":
                merges.append(value)
                continue
            if value[1] != line:
                value = (value[0], line, value[2])
            first = out.get(key)
            if first is not None:
                self.report(
                    line,
                    f"duplicate key '{key}' (first at line {first[1]})",
                    "YAML keeps only the last one; remove or rename one of them",
                )
            out[key] = value
        if merges:
            self.merged(out, merges)
        return (out, line_of(start), None)

    def items(self, start: YamlEvent) -> Iterator[tuple[str, int, bool, Entry]]:
        """Yield (key text, key line, key is plain, value entry) of a mapping, in order.

        Keys that are not scalars are reported and skipped. Duplicates are
        not checked here: the caller decides what a repeated key means.
        """
        next_event = self.next
        node = self.node
        while True:
            ev = next_event()
            if type(ev) is MappingEndEvent:
                return
            if type(ev) is not ScalarEvent:
                line = line_of(ev)
                node(ev)
                node(next_event())
                self.report(
                    line, "a mapping key must be plain text", "write keys as names"
                )
                continue
            if ev.anchor is not None:
                self.anchors[ev.anchor] = (ev.value, line_of(ev), ev.value)
            yield ev.value, line_of(ev), ev.implicit[0], node(next_event())

    def merged(self, out: dict[str, Entry], merges: list[Entry]) -> dict[str, Entry]:
        """Apply `<<` merge keys to `out`: keys already in it win, then earlier sources.

        Args:
            out: the mapping's own keys.
            merges: the values given to `<<` (mappings, or lists of mappings).

        Returns:
            `out`, completed.
        """
        for merge in merges:
            value, line = merge[0], merge[1]
            sources = value if isinstance(value, list) else [merge]
            for source in sources:
                if not isinstance(source[0], dict):
                    self.report(
                        line,
                        f"'<<' merges mappings, not {describe(source[0])}",
                        "write '<<: *anchor' where the anchor names a mapping",
                    )
                    continue
                for key, entry in source[0].items():
                    if key not in out:
                        out[key] = entry
        return out

    def _check_tag(self, start: YamlEvent) -> None:
        """Report a collection tag other than the plain map and seq tags."""
        tag = getattr(start, "tag", None)
        if tag not in _COLLECTION_TAGS:
            self.broken_lines.add(line_of(start))
            self.report(
                line_of(start),
                f"unsupported YAML tag '{tag}'",
                "plans use plain mappings and lists",
            )


LONG_KEY = "a key longer than 1024 characters"
"""Start of the message for a key past YAML's limit (PyYAML and libyaml read none longer as a key)."""


def syntax_line(error: yaml.YAMLError) -> tuple[int | None, str]:
    """The line and a one-line message of a YAML parser error.

    Args:
        error: what PyYAML raised.

    Returns:
        (1-based line or None, message without PyYAML's position block).
    """
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None)
    context = getattr(error, "context", None)
    if problem:
        text = f"{context}, {problem}" if context else str(problem)
    else:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
    line = mark.line + 1 if mark is not None else None
    if problem is not None and mark is not None and mark.column > 1024 and (
            problem.startswith("mapping values are not allowed") or "could not find expected ':'" in problem):
        # Past 1024 characters the parser no longer takes the text before the colon for a key
        # (libyaml and PyYAML alike), and says only this.
        text = f"{LONG_KEY} (a job id is at most {JOB_ID_MAX})"
    return line, text

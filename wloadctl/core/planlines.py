"""Plans whose jobs are one flow mapping a line, read without YAML events.

`wloadctl gen` and most plan generators write the `jobs` section last, one job
a line: `  load_01: {command: "true", depends_on: [open_day], sla: high}`.
Building a PyYAML event per scalar and bracket of such a line costs several
times the rest of the load. Here the text before the `jobs:` line still goes
through the YAML parser, and each job line is matched against a strict subset
of YAML whose meaning is certain: plain ids and words, quoted text without
escapes, flow lists of those, printable ASCII only. The values then take the
same way through `JobsReader` that parser events of the same text take, so the
jobs and problems are the same. A line outside that subset raises `NotPlain`,
and the caller reads the whole plan again through the parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from yaml.events import ScalarEvent

from wloadctl.core.planfields import SLA_NAMES
from wloadctl.core.planjobs import SLOT, JobsReader
from wloadctl.core.yamltree import Entry, YamlEvent, resolve_plain

_CHUNK = 1 << 16
"""Bytes read from the plan at a time."""
_HEADER_LIMIT = 1 << 26
"""The most text read looking for the `jobs:` line."""

_ID = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}"
# A job id is a key YAML must find on one line within 1024 characters; ids
# past 200 characters are left to the parser.
_PLAIN = r"[A-Za-z0-9_][A-Za-z0-9_./+-]*"
_DQ = r'"[ !#-\[\]-~]*"'
_SQ = r"'[ -&(-~]*'"
_SCALAR = rf"(?:{_DQ}|{_SQ}|{_PLAIN})"
_SEQ = rf"\[ *(?:{_SCALAR}(?: *, *{_SCALAR})*+)? *\]"
_KEY_TEXT = r"[A-Za-z_][A-Za-z0-9_]{0,1023}"
# A key YAML must find within 1024 characters, as an id (a longer one is the parser's to refuse).
_ITEM_TEXT = rf"{_KEY_TEXT}: +(?:{_SCALAR}|{_SEQ})"
_BODY = rf" *(?:{_ITEM_TEXT}(?: *, *{_ITEM_TEXT})*+)? *"
# (Possessive repetitions: giving back never helps these, and keeping the chance costs a frame an item.)

_JOBS_KEY = re.compile(rb"jobs:(?: *| +#[ -~]*)\r?")
"""The line that opens the `jobs` section: the key alone at column 0."""
_BLANK = re.compile(r" *(?:#[ -~]*)?")
"""An empty or comment-only line."""
_ITEM = re.compile(
    r"([A-Za-z_][A-Za-z0-9_]*): +(?:\"([^\"]*)\"|'([^']*)'|([^ ,\[\]{}]+)|\[((?:\"[^\"]*\"|'[^']*'|[^\]\"']+)*+)\])"
)
"""One `key: value` of a job line already known to be well formed."""
_SEQ_ITEM = re.compile(r"\"([^\"]*)\"|'([^']*)'|([^ ,\[\]]+)")
"""One item of a flow list already known to be well formed."""

_ID_SLOT, _LINE_SLOT, _COMMAND, _SLA = SLOT["id"], SLOT["line"], SLOT["command"], SLOT["sla"]
_DEPS, _KINDS, _TYPE = SLOT["depends_on"], SLOT["dep_kinds"], SLOT["type"]


class NotPlain(Exception):
    """The plan leaves the one-line shape: it must be read through the YAML parser."""


class JobLines:
    """A plan split at its `jobs:` line: the text before it, and the job lines after it."""

    def __init__(self, header: bytes, line: int, rest: bytes, stream: BinaryIO) -> None:
        self.header = header
        """The plan up to and including the `jobs:` line, for the YAML parser."""
        self.line = line
        """The 1-based line of the `jobs:` key."""
        self._rest = rest
        self._stream = stream

    @classmethod
    def split(cls, stream: BinaryIO) -> JobLines | None:
        """Read `stream` up to its first `jobs:` at column 0; None unless that line is the bare key.

        The text before it is held whole; past `_HEADER_LIMIT` bytes without
        such a line the plan is left to the parser. The job lines are read on
        in chunks by `lines`.
        """
        head = bytearray()  # grows in place: a header of one long line is not copied at every read
        at = -1
        while True:
            data = stream.read(_CHUNK)
            seen = len(head)
            head += data
            if at < 0 and head.startswith(b"jobs:"):
                at = 0
            elif at < 0:
                found = head.find(b"\njobs:", max(seen - 5, 0))
                at = found + 1 if found >= 0 else -1
            if at >= 0:
                end = head.find(b"\n", at)
                if end >= 0:
                    break
            if not data or len(head) > _HEADER_LIMIT:
                return None
        if not _JOBS_KEY.fullmatch(head, at, end):
            return None
        return cls(bytes(head[: end + 1]), head.count(b"\n", 0, at) + 1, bytes(head[end + 1 :]), stream)

    def chunks(self) -> Iterator[str]:
        """The text after the `jobs:` line, in pieces that end at a line break (but maybe the last).

        Raises:
            NotPlain: a byte outside ASCII (left to the parser's own decoding).
        """
        tail = bytearray(self._rest)  # grows in place: a long line is not copied at every read
        self._rest = b""
        read = self._stream.read
        seen = 0  # bytes of `tail` known to hold no line break
        while True:
            data = read(_CHUNK)
            if not data:
                break
            tail += data
            cut = tail.rfind(b"\n", seen) + 1
            if cut:
                yield _text(tail[:cut])
                del tail[:cut]
            seen = len(tail)
        if tail:
            # What the first read left after the `jobs:` line, or a last line
            # with no line break.
            yield _text(tail)

    def lines(self) -> Iterator[str]:
        """The lines after the `jobs:` line, without their line breaks.

        Raises:
            NotPlain: a byte outside ASCII (left to the parser's own decoding).
        """
        return lines_of(self.chunks())


def lines_of(chunks: Iterable[str]) -> Iterator[str]:
    """The lines of text pieces that each end at a line break (but maybe the last)."""
    for text in chunks:
        rows = text.split("\n")
        if text.endswith("\n"):
            rows.pop()
        yield from rows


def _text(block: bytes | bytearray) -> str:
    """ASCII text with CRLF line ends made LF; a lone CR stays, and matches no line."""
    try:
        return block.decode("ascii").replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise NotPlain from None


def read_job_lines(jobs: JobsReader, lines: Iterator[str], line: int) -> None:
    """Read every job line after the `jobs:` key on `line` into `jobs`.

    The usual line (a quoted command or none, maybe a list of upstream ids,
    maybe a known SLA tier) is taken apart by one pattern and the job built inline,
    as `JobsReader._stream` does; any other one-line job goes item by item.

    Args:
        jobs: the reader of the `jobs` section, before any job.
        lines: the lines after the key, up to the end of the file.
        line: the 1-based line of the key.

    Raises:
        NotPlain: a line is not a one-line job, a blank line or a comment; or
            the jobs are not all indented alike; or there is no job.
    """
    blank = _BLANK.fullmatch
    general: Any = None
    usual: Any = _never
    template = jobs.template
    shared_get, share = jobs.fields.shared.get, jobs.fields.share
    sla_names = SLA_NAMES
    index, ids, specs, up = jobs.index, jobs.ids, jobs.jobs, jobs.up
    index_get, id_at, ids_append = index.get, ids.__getitem__, ids.append
    up_extend, up_off_append = up.extend, jobs.up_off.append
    # The usual job sets only USUAL_FIELDS: the defaults give the rest, and these when it does not.
    make = jobs.usual_maker()
    no_command, no_tier = template[_COMMAND], template[_SLA]
    no_deps, no_kinds = template[_DEPS], template[_KINDS]
    # A job line without a command is complete only when the defaults give one, or make it a noop.
    bare_ok = template[_COMMAND] is not None or template[_TYPE] != "shell"
    for text in lines:
        line += 1
        m = usual(text)
        if m is None:
            if blank(text):
                continue
            if general is None:
                indent = len(text) - len(text.lstrip(" "))
                if not indent:
                    raise NotPlain
                general, usual = _patterns(text[:indent])
            m = general(text)
            if m is None:
                raise NotPlain
            _job_items(jobs, m[1], line, m[2])
            continue
        jid, body, command, deps, sla, deps2, sla2, sla3 = m.groups()
        if command is None:
            # No command of its own: the defaults' command or type (noop) must do.
            if not bare_ok:
                _job_items(jobs, jid, line, body)
                continue
            deps = deps2
            sla = sla2 if sla2 is not None else sla3
        tier = sla_names.get(sla) if sla is not None else None
        if command is not None:
            command = shared_get(command) or (share(command) if command.strip() else None)
            if command is None:
                _job_items(jobs, jid, line, body)
                continue
        if (sla is not None and tier is None) or jid in index:
            _job_items(jobs, jid, line, body)
            continue
        if deps is not None:
            names = deps.split(", ")
            found: list[Any] = list(map(index_get, names))
            if None in found:
                # An upstream further down (or none such): the reader links it later.
                vals = template.copy()
                vals[_ID_SLOT] = jid
                vals[_LINE_SLOT] = line
                if command is not None:
                    vals[_COMMAND] = command
                if tier is not None:
                    vals[_SLA] = tier
                vals[_KINDS] = None
                jobs.add(jid, line, vals, names, [line] * len(names))
                continue
            up_extend(found)
            upstream: tuple[str, ...] = tuple(map(id_at, found))
            kinds = None
            if len(found) > 1 and len(set(found)) < len(found):
                jobs.report_twice(jid, line, names)
        else:
            upstream, kinds = no_deps, no_kinds
        up_off_append(len(up))
        index[jid] = len(ids)
        ids_append(jid)
        specs[jid] = make(
            jid,
            command if command is not None else no_command,
            upstream,
            kinds,
            tier if tier is not None else no_tier,
            line,
        )
    if general is None:
        raise NotPlain


def _never(text: str) -> None:
    """Matches no line (the usual pattern before the indentation is known)."""
    return None


def _patterns(indent: str) -> tuple[Any, Any]:
    """(general, usual) fullmatch of a job line at this indentation.

    The general one gives (id, body); the usual one (id, body, command,
    upstream ids joined by ", " or None, SLA word or None, and for a line
    without a command: upstream ids, SLA word, SLA word of a line with only
    an SLA tier).
    """
    general = re.compile(rf"{indent}({_ID}): +\{{({_BODY})\}}(?: *| +#[ -~]*)")
    deps = rf"depends_on: \[((?:{_PLAIN}, )*{_PLAIN})\]"
    usual = re.compile(
        rf'{indent}({_ID}): \{{((?:command: "([ !#-\[\]-~]*)"(?:, {deps})?(?:, sla: ([a-z]+))?)'
        rf"|(?:{deps}(?:, sla: ([a-z]+))?)|(?:sla: ([a-z]+))|)\}}"
    )
    return general.fullmatch, usual.fullmatch


def _scalar(m: re.Match[str]) -> tuple[str, bool]:
    """(text, is plain) of a scalar matched as double-quoted, single-quoted or plain."""
    dq, sq, plain = m.groups()
    if plain is not None:
        return plain, True
    return (dq if dq is not None else sq), False


def _job_items(jobs: JobsReader, jid: str, line: int, body: str) -> None:
    """Read one job from the text between its braces, key by key.

    This follows `JobsReader._stream` for the same text: command, SLA tier and
    a list of upstream ids are taken as they come, other settings (and those
    three when unusual) are applied after the last key, then the job is added.
    """
    vals = jobs.template.copy()
    vals[_ID_SLOT] = jid
    vals[_LINE_SLOT] = line
    deps: list[str] | tuple[list[str], list[Any]] | None = None
    others: list[tuple[str, Entry]] = []
    keys: list[tuple[str, int]] = []
    fields = jobs.fields
    for item in _ITEM.finditer(body):
        key, seq = item[1], item[5]
        keys.append((key, line))
        if seq is None:
            dq, sq, plain = item[2], item[3], item[4]
            text = plain if plain is not None else dq if dq is not None else sq
            if key == "command":
                if plain is None or resolve_plain(text) is text:
                    command = fields.shared.get(text)
                    if command is None and text.strip():
                        command = fields.share(text)
                    if command is not None:
                        vals[_COMMAND] = command
                        continue
            elif key == "sla":
                tier = SLA_NAMES.get(text)
                if tier is not None:
                    vals[_SLA] = tier
                    continue
            entry: Entry = (resolve_plain(text) if plain is not None else text, line, text)
        elif key == "depends_on":
            deps = [_scalar(d)[0] for d in _SEQ_ITEM.finditer(seq)]
            vals[_KINDS] = None
            continue
        else:
            items: list[Entry] = []
            for d in _SEQ_ITEM.finditer(seq):
                text, is_plain = _scalar(d)
                items.append((resolve_plain(text) if is_plain else text, line, text))
            entry = (items, line, None)
        others.append((key, entry))
    if len(keys) > 1 and len({key for key, _ in keys}) < len(keys):
        jobs.report_repeats(jid, keys)
    for key, entry in others:
        if key == "depends_on":
            deps = jobs.apply_deps(vals, jid, entry) or deps
        else:
            jobs.apply(vals, jid, key, entry)
    if type(deps) is list:
        jobs.add(jid, line, vals, deps, [line] * len(deps))
    else:
        jobs.add(jid, line, vals, *(deps or (None, None)))


def bare_value(ev: YamlEvent) -> bool:
    """Whether `ev` is the empty plain value YAML gives a key with nothing after it."""
    return (
        type(ev) is ScalarEvent
        and ev.value == ""
        and ev.implicit[0]
        and ev.anchor is None
        and ev.tag is None
    )

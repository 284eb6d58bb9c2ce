"""Plans whose jobs are written one key a line (block style), read without YAML events.

Plans written by hand put each setting of a job on its own line, and each
upstream id on a `- id` line under `depends_on:`. The parser makes an event
of every key, value and list item of them, which costs several times the rest
of the load. As for one-line jobs (see planlines), the lines after `jobs:` are
matched against a strict subset of YAML whose meaning is certain: a job id
key alone on its line, then keys one deeper, each with a plain or quoted
scalar, a flow list, or nothing and then `- item` lines of scalars. Jobs
written one a line may be mixed in. The values then take the way through
`JobsReader` that parser events of the same text take, with the same lines,
so the jobs and problems are the same. Anything else raises `NotPlain`, and
the caller reads the whole plan again through the parser.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

from wloadctl.core.planfields import SLA_NAMES
from wloadctl.core.planjobs import SLOT, JobsReader
from wloadctl.core.planlines import (
    _DQ,
    _ID,
    _KEY_TEXT,
    _SEQ,
    _SEQ_ITEM,
    _SQ,
    JobLines,
    NotPlain,
    _job_items,
    _patterns,
    _scalar,
    lines_of,
    read_job_lines,
)
from wloadctl.core.yamltree import Entry, resolve_plain

_END = r"(?: *| +#[ -~]*)"
"""What may close a line: spaces, or a comment after at least one space."""
_BPLAIN = r"(?:[A-Za-z0-9_./~$(+=]|-(?=[!-~]))(?:[!-9;-~]+|:(?=[!-~])| +(?=[!\"$-~]))*+"
"""A plain scalar on one line of a block: no indicator first, no `: `, no ` #`, no space or `:` last.

The repetition is possessive: nothing after it could match what it gave back,
and a repetition that may give back keeps a frame a step (hundreds of bytes a
character of a long description)."""
_HEAD = re.compile(rf"( +)({_ID}):{_END}")
"""A block job's first line: its id alone (its settings follow, one deeper)."""
_KEY = re.compile(
    rf"( +)({_KEY_TEXT}):(?: +(?:({_DQ})|({_SQ})|({_SEQ})|({_BPLAIN})))?{_END}"
)
"""One setting of a block job: indentation, key, and a scalar or flow list or nothing."""
_ITEM = re.compile(rf"( +)- +(?:({_DQ})|({_SQ})|({_BPLAIN})){_END}")
"""One `- item` of a block list under a key that has no value on its own line."""
_BLANK = re.compile(rf"(?:{_END}|#[ -~]*)")
"""An empty or comment-only line."""

_ID_SLOT, _LINE_SLOT, _COMMAND, _SLA = SLOT["id"], SLOT["line"], SLOT["command"], SLOT["sla"]
_DEPS, _KINDS, _TYPE = SLOT["depends_on"], SLOT["dep_kinds"], SLOT["type"]

Value = tuple[str, bool] | list[tuple[str, bool, int]]
"""A setting's value: (scalar text, is plain), or list items as (text, is plain, line)."""


def read_jobs(jobs: JobsReader, split: JobLines, line: int) -> None:
    """Read the jobs after the `jobs:` key on `line`, one a line or one key a line.

    Args:
        jobs: the reader of the `jobs` section, before any job.
        split: the plan split at its `jobs:` line.
        line: the 1-based line of the key.

    Raises:
        NotPlain: the jobs are not all written in those shapes.
    """
    chunks = split.chunks()
    seen: list[str] = []
    for text in chunks:
        seen.append(text)
        first = next((t for t in text.split("\n") if t and not _BLANK.fullmatch(t)), None)
        if first is None:
            continue
        head = _HEAD.fullmatch(first)
        rest = itertools.chain(seen, chunks)
        if head is None:
            read_job_lines(jobs, lines_of(rest), line)
        else:
            _BlockReader(jobs, line, head[1]).read(rest)
        return
    raise NotPlain


class _BlockReader:
    """The jobs of one plan read from text, block jobs and one-line jobs alike."""

    def __init__(self, jobs: JobsReader, line: int, indent: str) -> None:
        self.jobs = jobs
        """Where the jobs go."""
        self.line = line
        """The 1-based line just before the next one read."""
        self.indent = indent
        """The indentation of every job id."""
        self.flow, _ = _patterns(indent)
        self.usual: Any = _never
        """Matches a whole usual block job (known once a first one was read the general way)."""
        self.count = 0
        """Jobs read."""
        self.item_width = -1
        """Indentation of the first `- item` line seen (-1: none yet)."""
        self.item_skip = 0
        self.item_sep = ""

    def read(self, chunks: Iterable[str]) -> None:
        """Read every chunk of text (each ending at a line break but maybe the last)."""
        start = "\n" + self.indent
        skip = len(start)
        # The text after the last cut, in pieces: it holds no line that starts a job (but maybe its last line
        # break, whose next line was not read yet), so only its last `skip` characters (`edge`) and the new chunk
        # are searched, and it is joined only once cut. (Searching and copying it whole at each chunk took time in
        # the square of a job's length: a job of 400,000 upstreams took seconds.)
        held: list[str] = []
        edge = ""
        for chunk in chunks:
            window = edge + chunk
            # Cut after the last whole job: before the last line that starts one.
            cut = window.rfind(start)
            while cut >= 0 and (cut + skip >= len(window) or window[cut + skip] in " #\n"):
                cut = window.rfind(start, 0, cut)
            if cut < 0:
                held.append(chunk)
                edge = window[-skip:]
                continue
            held.append(chunk)
            text = "".join(held)
            cut += len(text) - len(window)
            self._text(text[: cut + 1])
            rest = text[cut + 1 :]
            held = [rest]
            edge = rest[-skip:]
        tail = "".join(held)
        if tail:
            self._text(tail if tail.endswith("\n") else tail + "\n")
        if not self.count:
            raise NotPlain

    def _text(self, text: str) -> None:
        """Read whole jobs (and blank lines) from `text`, which ends with a line break."""
        jobs = self.jobs
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
        # Lines and jobs are counted in locals here, and on the reader itself the general way.
        line, count = self.line, self.count
        general = self._general_from
        # A job without a command is complete only when the defaults give one, or make it a noop.
        bare_ok = template[_COMMAND] is not None or template[_TYPE] != "shell"
        pos, end = 0, len(text)
        count_lines = text.count
        while pos < end:
            m = self.usual(text, pos)
            if m is None:
                pos, line, count = general(text, pos, line, count)
                continue
            jid, command, plain, deps, listed, sla = m.groups()
            if plain is not None:
                # Unquoted text may be a number or a boolean to YAML: those go the general way.
                if resolve_plain(plain) is not plain:
                    pos, line, count = general(text, pos, line, count)
                    continue
                command = plain
            if (
                (command is None and not bare_ok)
                or (command is None and deps is None and listed is None and sla is None)
                or jid in index
            ):
                pos, line, count = general(text, pos, line, count)
                continue
            tier = sla_names.get(sla) if sla is not None else None
            if sla is not None and tier is None:
                pos, line, count = general(text, pos, line, count)
                continue
            if command is not None:
                command = shared_get(command) or (share(command) if command.strip() else None)
                if command is None:
                    pos, line, count = general(text, pos, line, count)
                    continue
            if deps is not None:
                names = deps[self.item_skip : -1].split(self.item_sep)
            elif listed is not None:
                names = listed.split(", ")
            else:
                names = []
            if names:
                found: list[Any] = list(map(index_get, names))
                if None in found:
                    pos, line, count = general(text, pos, line, count)
                    continue
            jline = line + 1
            after = m.end()
            line += count_lines("\n", pos, after)
            pos = after
            if names:
                up_extend(found)
                upstream: tuple[str, ...] = tuple(map(id_at, found))
                kinds = None
                if len(found) > 1 and len(set(found)) < len(found):
                    jobs.report_twice(jid, jline, names)
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
                jline,
            )
            count += 1
        self.line = line
        self.count = count

    def _general_from(self, text: str, pos: int, line: int, count: int) -> tuple[int, int, int]:
        """`_general` from the usual loop's own counts of lines and jobs; (position, lines, jobs) after it."""
        self.line, self.count = line, count
        pos = self._general(text, pos)
        return pos, self.line, self.count

    def _general(self, text: str, pos: int) -> int:
        """Read one job, blank line or comment at `pos` line by line; the position after it."""
        nl = text.index("\n", pos)
        row = text[pos:nl]
        self.line += 1
        if _BLANK.fullmatch(row):
            return nl + 1
        if not row.startswith(self.indent) or row[len(self.indent)] == " ":
            raise NotPlain
        head = _HEAD.fullmatch(row)
        if head is None:
            flow = self.flow(row)
            if flow is None:
                raise NotPlain
            _job_items(self.jobs, flow[1], self.line, flow[2])
            self.count += 1
            return nl + 1
        jid, jline = head[2], self.line
        pos, items = self._settings(text, nl + 1)
        if items is None:
            # The id alone, with nothing under it: YAML gives the job the value null.
            self.jobs.add_entry(jid, jline, (None, jline, ""))
        else:
            _block_job(self.jobs, jid, jline, items)
        self.count += 1
        return pos

    def _settings(self, text: str, pos: int) -> tuple[int, list[tuple[str, int, Value]] | None]:
        """The (key, line, value) settings of a block job from `pos`; the position after them."""
        items: list[tuple[str, int, Value]] = []
        deep = len(self.indent)
        inner = -1  # the settings' indentation
        listed = -1  # indentation of the `- item` lines under the last key (-1: no list may follow)
        end = len(text)
        line = self.line
        while pos < end:
            nl = text.index("\n", pos)
            row = text[pos:nl]
            if _BLANK.fullmatch(row):
                # Blank lines before the next job are read again as such, by the caller.
                ahead = pos
                while ahead < end and _BLANK.fullmatch(text, ahead, text.index("\n", ahead)):
                    ahead = text.index("\n", ahead) + 1
                nxt = text[ahead : ahead + deep + 1]
                if ahead >= end or (len(nxt) > deep and nxt[deep] != " "):
                    break
                # All of them at once: looking ahead again from each would take time in the square of their count.
                line += text.count("\n", pos, ahead)
                pos = ahead
                continue
            width = len(row) - len(row.lstrip(" "))
            if width <= deep:
                break
            line += 1
            pos = nl + 1
            if listed >= 0 and width >= inner and row[width] == "-":
                m = _ITEM.fullmatch(row)
                if m is None or (listed and width != listed):
                    raise NotPlain
                listed = width
                scalar = _scalar_of(m[2], m[3], m[4])
                value = items[-1][2]
                assert isinstance(value, list)
                value.append((*scalar, line))
                if self.item_width < 0:
                    self.item_width = width
                continue
            m = _KEY.fullmatch(row)
            if m is None or (inner >= 0 and width != inner):
                raise NotPlain
            if listed >= 0 and not items[-1][2]:
                # A key with nothing after it and no items: YAML's null.
                items[-1] = (items[-1][0], items[-1][1], ("", True))
            inner = width
            listed = -1
            dq, sq, seq, plain = m[3], m[4], m[5], m[6]
            if seq is not None:
                items.append((m[2], line, [(*_scalar(d), line) for d in _SEQ_ITEM.finditer(seq[1:-1])]))
            elif dq is None and sq is None and plain is None:
                items.append((m[2], line, []))
                listed = 0
            else:
                items.append((m[2], line, _scalar_of(dq, sq, plain)))
        if listed >= 0 and not items[-1][2]:
            items[-1] = (items[-1][0], items[-1][1], ("", True))
        self.line = line
        if not items:
            return pos, None
        if self.usual is _never and inner >= 0:
            self._learn(" " * inner)
        return pos, items

    def _learn(self, inner: str) -> None:
        """Compile the pattern of the usual job now that the indentation is known."""
        item = " " * self.item_width if self.item_width >= len(inner) else inner + "  "
        self.item_skip = len(item) + 2
        self.item_sep = f"\n{item}- "
        plain = r"[A-Za-z0-9_][A-Za-z0-9_./+-]*"
        self.usual = re.compile(
            rf"{self.indent}({_ID}):\n"
            rf'(?:{inner}command: (?:"([ !#-\[\]-~]*)"|({_BPLAIN}))\n)?'
            rf"(?:{inner}depends_on:(?:\n((?:{item}- {plain}\n)+)| \[((?:{plain}, )*{plain})\]\n))?"
            rf"(?:{inner}sla: ([a-z]+)\n)?"
            rf"(?: *(?:#[ -~]*)?\n)*"
            rf"(?={self.indent}[^ #\n]|\Z)"
        ).match


def _never(text: str, pos: int) -> None:
    """Matches no job (the usual pattern before the indentation is known)."""
    return None


def _scalar_of(dq: str | None, sq: str | None, plain: str | None) -> tuple[str, bool]:
    """(text, is plain) of a scalar matched as double-quoted, single-quoted or plain."""
    if plain is not None:
        return plain, True
    quoted = dq if dq is not None else sq
    assert quoted is not None
    return quoted[1:-1], False


def _block_job(jobs: JobsReader, jid: str, line: int, items: list[tuple[str, int, Value]]) -> None:
    """Build one job from its settings as `JobsReader._stream` does from the same text's events.

    Command, SLA tier and a list of upstream ids are taken as they come; other
    settings (and those three when unusual) are applied after the last key,
    then the job is added.
    """
    vals = jobs.template.copy()
    vals[_ID_SLOT] = jid
    vals[_LINE_SLOT] = line
    deps: tuple[list[str], list[Any]] | None = None
    others: list[tuple[str, Entry]] = []
    fields = jobs.fields
    for key, kline, value in items:
        if type(value) is tuple:
            text, plain = value
            if key == "command":
                if not plain or resolve_plain(text) is text:
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
            entry: Entry = (resolve_plain(text) if plain else text, kline, text)
        else:
            assert isinstance(value, list)
            if key == "depends_on":
                deps = ([t for t, _, _ in value], [at for _, _, at in value])
                vals[_KINDS] = None
                continue
            entry = ([(resolve_plain(t) if p else t, at, t) for t, p, at in value], kline, None)
        others.append((key, entry))
    if len(items) > 1 and len({key for key, _, _ in items}) < len(items):
        jobs.report_repeats(jid, [(key, kline) for key, kline, _ in items])
    for key, entry in others:
        if key == "depends_on":
            deps = jobs.apply_deps(vals, jid, entry) or deps
        else:
            jobs.apply(vals, jid, key, entry)
    jobs.add(jid, line, vals, *(deps or (None, None)))


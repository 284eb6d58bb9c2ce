"""Plan files: YAML to a validated Plan, all problems reported at once by line."""

from __future__ import annotations

import bisect
import dataclasses
import gc
import hashlib
import io
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import yaml
from yaml.events import MappingEndEvent, MappingStartEvent, ScalarEvent

from wloadctl.core.durations import closed_window
from wloadctl.core.loops import expand_for_each
from wloadctl.core.plan import JobSpec, Plan, PlanEdges
from wloadctl.core.planblocks import read_jobs
from wloadctl.core.planbytes import line_count, unreadable
from wloadctl.core.planchecks import check_jobs
from wloadctl.core.planfields import DEFAULT_KEYS, TOP_KEYS, FieldReader
from wloadctl.core.planjobs import FIELDS, SLOT, JobsReader
from wloadctl.core.planlines import JobLines, NotPlain, bare_value
from wloadctl.core.plantop import (
    group_weights,
    read_four_eyes,
    read_limits,
    read_name,
    read_on_failure,
    read_roles,
    read_schedule,
    read_share,
    read_timezone,
)
from wloadctl.core.planvalues import (
    FieldError,
    amounts,
    key_hint,
    key_text,
    mapping,
)
from wloadctl.core.yamltree import (
    LONG_KEY,
    AliasBomb,
    Entry,
    TreeReader,
    YamlEvent,
    describe,
    line_of,
    plain_value,
    syntax_line,
)
from wloadctl.errors import PlanError, WloadError

MAX_PROBLEMS = 1000
"""Problems listed in full; past this, one closing line counts the ones left out."""

_LONG_LINE = 500
"""A problem's line longer than this echoes a long value of the plan: its long quoted parts are clipped."""
_QUOTED = re.compile(r"'([^'\n]{81,})'")
"""A quoted part of a message too long to show whole."""

_BLANK = JobSpec(id="", command=None)
_SETTINGS = ("defaults", "resources")


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file.

    Args:
        path: the YAML file.

    Returns:
        The plan, with `path` as given and `digest` the SHA-256 of the file's bytes.

    Raises:
        PlanError: the file cannot be read, or the plan is invalid; `problems`
            lists every problem found, each with file, line and job.
    """
    name = str(path)
    try:
        # The parser pulls the file in chunks: a million-job plan is never
        # held as one block of bytes.
        with _open_regular(name) as stream:
            digesting = _Digesting(stream)
            return _load(
                lambda: digesting if digesting.fresh else open(path, "rb"),
                digesting,
                name,
            )
    except FileNotFoundError:
        raise PlanError(
            f"plan file not found: {name}",
            file=name,
            hint="check the path; plans are YAML files",
        ) from None
    except IsADirectoryError:
        raise PlanError(f"{name} is a directory, not a plan file", file=name) from None
    except OSError as err:
        raise PlanError(
            f"cannot read plan file {name}: {err.strerror or err}", file=name
        ) from None


_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _open_regular(name: str) -> BinaryIO:
    """Open a plan file for reading, refusing what is not a regular file.

    Opened without blocking: opening a named pipe waits for a writer, and reading
    a device may never end. A directory fails as IsADirectoryError, like open().
    """
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(name)
        if not stat.S_ISREG(mode):
            kind = next((what for test, what in _KINDS if test(mode)), "not a regular file")
            raise PlanError(f"{name} is {kind}, not a plan file", file=name,
                            hint="a plan is a regular YAML file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_plan_text(text: str, path: str = "<string>") -> Plan:
    """Validate a plan given as text (a stored copy, or a test's inline YAML).

    Args:
        text: the YAML.
        path: the name used in messages and kept as `Plan.path`.

    Returns:
        The plan; its digest is that of the UTF-8 bytes of `text`.

    Raises:
        PlanError: the plan is invalid.
    """
    data = text.encode("utf-8")
    return _load(lambda: data, hashlib.sha256(data), path)


def load_plan_bytes(data: bytes, path: str = "<bytes>") -> Plan:
    """Validate a plan given as the bytes of a file (read from a pipe, or a fuzzer's input).

    Raises:
        PlanError: the plan is invalid (including bytes that are not UTF-8).
    """
    return _load(lambda: data, hashlib.sha256(data), path)


class _Digesting:
    """A binary file that hashes the bytes the YAML parser reads from it."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        """The open plan file."""
        self.sha = hashlib.sha256()
        """The digest of what was read so far."""
        self.fresh = True
        """Nothing was read yet (so a first pass may use this stream)."""
        self.name = getattr(stream, "name", "<file>")
        """The file's name, which the parser puts in its marks."""

    def read(self, size: int = -1) -> bytes:
        """Read like the file does, hashing what is read."""
        self.fresh = False
        data = self.stream.read(size)
        self.sha.update(data)
        return data

    def hexdigest(self) -> str:
        """SHA-256 of the whole file, in hex."""
        # A parser stops at the end of the document; anything after it still counts.
        self.read()
        return self.sha.hexdigest()


def _load(source: Callable[[], Any], digest: Any, path: str) -> Plan:
    """Build the plan from `source` (called once a pass); report every problem."""
    # A plan is millions of objects and no reference cycles: the cyclic
    # collector would only walk them over and over while they are built.
    collecting = gc.isenabled()
    gc.disable()
    try:
        builder: _PlanBuilder | None = _PlanBuilder(path)
        by_lines = True
        try:
            plan = builder.build(source, by_lines=True)  # type: ignore[union-attr]
        except NotPlain:
            builder = None
            by_lines = False
        if builder is None:
            builder = _PlanBuilder(path)
            plan = builder.build(source)
    except MemoryError:
        builder = plan = None
        raise PlanError(
            f"not enough memory to read the plan {path}",
            file=path,
            hint="look for a huge value in it (a very long line, a list of millions), or raise the memory limit",
        ) from None
    finally:
        if collecting:
            gc.enable()
    problems = builder.all_problems()
    if problems or plan is None:
        if not problems:
            problems = [WloadError("the plan could not be read", file=path)]
        shown = [_shortened(p) for p in sorted(problems, key=lambda p: p.line or 0)[:MAX_PROBLEMS]]
        more = max(0, len(problems) - MAX_PROBLEMS)
        if more:
            shown.append(WloadError(f"{more} more problems not shown", file=path))
        count = len(problems)
        raise PlanError(
            f"{count} problem{'s' if count > 1 else ''} in the plan",
            problems=shown,
            unshown=more,
            file=path,
        )
    plan = dataclasses.replace(plan, digest=digest.hexdigest(), read_by_lines=by_lines)
    return expand_for_each(plan) if any(j.for_each is not None for j in plan.jobs.values()) else plan


def _shortened(problem: WloadError) -> WloadError:
    """`problem`, with each long quoted value clipped as `describe` clips text when its line would be long.

    Most messages quote the value they refuse ('unknown SLA tier ...', 'depends on unknown job ...'): a value of
    megabytes made a line of megabytes, which no one reads and which floods a terminal or a log.
    """
    if len(problem.one_line()) > _LONG_LINE:
        def clip(m: re.Match[str]) -> str:
            return f"'{m[1][:60]}...({len(m[1])} characters)'"

        problem.message = _QUOTED.sub(clip, problem.message)
        if problem.hint is not None:
            problem.hint = _QUOTED.sub(clip, problem.hint)
    return problem


class _PlanBuilder:
    """One load of one plan: reads the YAML once (twice if `defaults` follow `jobs`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        """The plan's name in messages."""
        self.problems: list[WloadError] = []
        """Problems outside the jobs and the settings."""
        self.sink = self.problems
        """Where `report` puts the next problem."""
        self.settle_problems: list[WloadError] = []
        """Problems of `defaults` and `resources` (replaced when they are read again)."""
        self.job_problems: list[WloadError] = []
        self.value_sink: list[WloadError] = self.problems
        """Where the problems of the top-level value being read go."""
        self.sink_mark = 0
        """How many problems value_sink held when that value began."""
        """Problems of the jobs (replaced when they are read again)."""
        self.top: dict[str, Entry] = {}
        """Top-level entries other than the jobs."""
        self.failed = False
        """The YAML could not be read to the end: no cross-job checks."""
        self.capacity: dict[str, int] = {}
        """Declared resources."""
        self.jobs_reader: JobsReader | None = None
        """The reader of the `jobs` section, once it was met."""
        self.reader: TreeReader | None = None
        """The YAML reader of the pass under way (its broken lines are told once, by it)."""
        self.source: Callable[[], Any] | None = None
        """Gives the plan's bytes again (a stream or bytes), for a closer look at what the parser could not read."""

    def all_problems(self) -> list[WloadError]:
        """Every problem found, from every part of the plan."""
        return self.problems + self.settle_problems + self.job_problems

    def report(
        self,
        line: int | None,
        message: str,
        hint: str | None = None,
        job: str | None = None,
        kind: type[WloadError] = WloadError,
    ) -> None:
        """Record one problem of this plan file (not one of a line whose YAML could not be read: that is said)."""
        if line is not None and self.reader is not None and line in self.reader.broken_lines:
            return
        self.sink.append(kind(message, file=self.path, line=line, job=job, hint=hint))

    def build(self, source: Callable[[], Any], *, by_lines: bool = False) -> Plan | None:
        """Read and check the plan; None when it cannot be read to the end.

        With `by_lines`, the jobs are read line by line after the rest of
        the plan (see planlines and planblocks), and NotPlain is raised when the plan is not
        written that way: it must then be read again by a fresh builder.
        """
        self.source = source
        data = source()
        try:
            if by_lines:
                split = JobLines.split(io.BytesIO(data) if isinstance(data, bytes) else data)
                if split is None:
                    raise NotPlain
                late = self._pass(split.header, first=True, lines=split)
            else:
                late = self._pass(data, first=True)
        finally:
            if hasattr(data, "close"):
                data.close()
        if late and not self.failed:
            # `defaults` or `resources` came after `jobs`: read the jobs again
            # under them. Plans written that way are small; generated ones
            # put the jobs last.
            again = source()
            try:
                self._pass(again, first=False)
            finally:
                if hasattr(again, "close"):
                    again.close()
        if self.failed:
            return None
        jobs = self.jobs_reader
        if jobs is None:
            self.problems.append(
                WloadError(
                    "the plan has no jobs",
                    file=self.path,
                    hint="add a 'jobs:' mapping of job id -> job",
                )
            )
            return None
        variables = self._top_field("variables", lambda e: plain_value((mapping(e, "variables"), 0, None)), {})
        written = self.top.get("variables")
        # (variables that could not be read are reported as such, not as each name a condition reads of them)
        readable = written is None or written[0] is None or type(written[0]) is dict
        self.sink = self.job_problems
        check_jobs(jobs, variables if readable else None)
        self.sink = self.problems
        name = self._top_field("name", read_name, None)
        given = self.top.get("name")
        if not name and (given is None or not given[0]):
            self.report(
                self.top["name"][1] if "name" in self.top else 1,
                "the plan has no name",
                "add 'name: <plan name>' at the top",
            )
        return Plan(
            name=name or "",
            jobs=jobs.jobs,
            resources=self.capacity,
            variables=variables,
            on_failure=self._top_field("on_failure", read_on_failure, None),
            timezone=self._top_field("timezone", read_timezone, None),
            path=self.path,
            groups=self._groups(jobs.jobs),
            schedule=self._top_field("schedule", read_schedule, None),
            share=self._top_field("share", read_share, 1.0),
            limits=self._top_field("limits", read_limits, "claim"),
            roles=self._top_field("roles", read_roles, None),
            four_eyes=self._top_field("four_eyes", read_four_eyes, ()),
            edges=PlanEdges(jobs.jobs, jobs.ids, jobs.index, jobs.up, jobs.up_off),
        )

    def _groups(self, jobs: dict[str, JobSpec]) -> dict[str, float]:
        """The fair-share `groups` (name -> weight); every job's group must be one of them."""
        wrong: list[FieldError] = []
        groups: dict[str, float] = self._top_field("groups", lambda e: group_weights(e, wrong), {})
        for bad in wrong:
            self.report(bad.line, bad.message, bad.hint)
        # A group whose weight is wrong is still declared: its own line says what is wrong.
        given = self.top.get("groups")
        declared = given[0] if given is not None and type(given[0]) is dict else groups
        for j in jobs.values():
            if j.group is not None and j.group not in declared:
                self.report(j.line, f"job '{j.id}': group '{j.group}' is not declared under groups",
                            f"declared: {', '.join(declared) or 'none'}")
        return groups

    def _top_field(self, key: str, read: Callable[[Entry], Any], absent: Any) -> Any:
        entry = self.top.get(key)
        if entry is None or entry[0] is None:
            return absent
        try:
            return read(entry)
        except FieldError as bad:
            self.report(bad.line, bad.message, bad.hint)
            return absent

    def _pass(self, data: Any, *, first: bool, lines: JobLines | None = None) -> bool:
        """Read the document; returns whether settings came after the jobs.

        With `lines`, `data` is the plan up to its `jobs:` line and the jobs
        are read from `lines`; NotPlain is raised when that split does not
        hold (the `jobs` key is not that line's, or the text before it is not
        a plain block mapping).
        """
        # A second pass only re-reads jobs: the first reported everything else.
        outside: list[WloadError] = self.problems if first else []
        self.sink = outside
        reader = TreeReader(
            data, lambda line, message, hint: self.sink.append(WloadError(message, file=self.path, line=line,
                                                                          hint=hint))
        )
        self.reader = reader
        late = False
        try:
            root = reader.root()
            if not self._root_ok(reader, root):
                if lines is not None:
                    raise NotPlain
                return False
            self._settle()
            next_event = reader.next
            while True:
                ev = next_event()
                if type(ev) is MappingEndEvent:
                    break
                if lines is not None and self.jobs_reader is not None:
                    raise NotPlain
                if type(ev) is not ScalarEvent:
                    line = line_of(ev)
                    reader.node(ev)
                    reader.node(next_event())
                    self.report(
                        line,
                        "a top-level key must be plain text",
                        key_hint("?", TOP_KEYS),
                    )
                    continue
                key, line = ev.value, line_of(ev)
                value_ev = next_event()
                if lines is not None and key == "jobs" and (
                    key in self.top or line != lines.line or not bare_value(value_ev)
                ):
                    raise NotPlain
                if key in self.top and first:
                    self.report(
                        line,
                        f"duplicate key '{key}' (first at line {self.top[key][1]})",
                        "YAML keeps only the last one; remove or rename one of them",
                    )
                self.value_sink, self.sink_mark = self.sink, len(self.sink)
                if key == "jobs":
                    self.top[key] = (True, line, None)
                    self.sink = self.value_sink = self.job_problems = []
                    self.sink_mark = 0
                    self.jobs_reader = JobsReader(
                        self.fields, self.template, self.report
                    )
                    if lines is None:
                        self.jobs_reader.read(reader, value_ev, line)
                    else:
                        read_jobs(self.jobs_reader, lines, line)
                    self._name_jobs(self.jobs_reader)
                    self.sink = outside
                    continue
                entry = reader.node(value_ev)
                if not first:
                    continue
                if key not in TOP_KEYS:
                    self.report(
                        line, f"unknown top-level key '{key_text(key)}'", key_hint(key, TOP_KEYS)
                    )
                self.top[key] = (entry[0], line, entry[2])
                if key in _SETTINGS:
                    late = late or "jobs" in self.top
                    self._settle()
            reader.finish()
            if lines is not None and self.jobs_reader is None:
                raise NotPlain
        except yaml.YAMLError as err:
            if lines is not None:
                raise NotPlain from None
            self.failed = True
            if isinstance(err, yaml.reader.ReaderError) and self.source is not None:
                self.sink = self.problems
                self.report(*unreadable(err, self.source))
                return late
            where, text = syntax_line(err)
            if where is not None and where > 1 and self.source is not None:
                # At the end of the text the parser's mark is past the last line: the problem is on that one, or,
                # for a flow list or mapping never closed, on the line that opened it.
                last = max(1, line_count(self.source))
                opened = getattr(err, "context_mark", None)
                if where > last and opened is not None and "flow" in str(getattr(err, "context", "")):
                    where = opened.line + 1
                where = min(where, last)
            if text.startswith(LONG_KEY) and str(getattr(err, "problem", "")).startswith("mapping values"):
                # The key was read as the value of the mapping above it before the parser gave up:
                # what was said of that value ("jobs must be a mapping ..., not the text ...") is false.
                del self.value_sink[self.sink_mark:]
            self.sink = self.problems
            self.report(
                where,
                f"YAML syntax error: {text}",
                "check the indentation and quoting around this line",
            )
        except AliasBomb as bomb:
            self.failed = True
            self.sink = self.problems
            self.report(bomb.line, bomb.message,
                        "an anchor's aliases (and theirs) repeat it over and over: write the values out, or fewer")
        except RecursionError:
            if lines is not None:
                raise NotPlain from None
            self.failed = True
            self.sink = self.problems
            self.report(None, "the YAML is nested too deeply to be a plan")
        finally:
            reader.close()
            self.sink = self.problems
        return late

    def _name_jobs(self, jobs: JobsReader) -> None:
        """Name the job of each problem the YAML reader found inside one (a duplicate key in its env, ...):
        the job written last above the problem's line. The reader itself does not know whose values it reads."""
        if all(p.job is not None or p.line is None for p in self.job_problems):
            return
        starts = sorted([(jobs.jobs[j].line, j) for j in jobs.ids] + jobs.repeated)
        lines = [line for line, _j in starts]
        for p in self.job_problems:
            if p.job is None and p.line is not None:
                k = bisect.bisect_right(lines, p.line) - 1
                if k >= 0:
                    p.job = starts[k][1]

    def _root_ok(self, reader: TreeReader, root: YamlEvent | None) -> bool:
        if type(root) is MappingStartEvent:
            return True
        self.failed = True
        if root is None:
            self.report(
                None, "the plan is empty", "a plan needs at least 'name:' and 'jobs:'"
            )
            return False
        entry = reader.node(root)
        if entry[0] is None:
            self.report(
                entry[1],
                "the plan is empty",
                "a plan needs at least 'name:' and 'jobs:'",
            )
        else:
            self.report(
                entry[1],
                f"the top level must be a mapping, not {describe(entry[0])}",
                "start with 'name: ...' and 'jobs:'",
            )
        return False

    def _settle(self) -> None:
        """Read `resources` and `defaults` (again), which every job starts from."""
        saved, self.sink = self.sink, []
        self.capacity = {}
        res = self.top.get("resources")
        if res is not None and res[0] is not None:
            wrong: list[FieldError] = []
            try:
                self.capacity = {
                    name: amount for name, amount, _ in amounts(res, "resource", wrong)
                }
            except FieldError as bad:
                wrong.append(bad)
            for w in wrong:
                self.report(w.line, w.message, w.hint)
        declared = tuple(res[0]) if res is not None and type(res[0]) is dict else ()
        self.fields = FieldReader(self.capacity, declared)
        self.template = [getattr(_BLANK, name) for name in FIELDS]
        defaults = self.top.get("defaults")
        if defaults is not None and defaults[0] is not None:
            try:
                self._defaults(mapping(defaults, "defaults"))
            except FieldError as bad:
                self.report(bad.line, bad.message, bad.hint)
        self.fields.default_env = dict(self.template[SLOT["env"]])
        self.fields.default_retry = self.template[SLOT["retry"]]
        self.settle_problems, self.sink = self.sink, saved

    def _defaults(self, given: dict[str, Entry]) -> None:
        readers = JobsReader(self.fields, self.template, self.report).readers
        for key, entry in given.items():
            if key not in DEFAULT_KEYS:
                hint = key_hint(key, DEFAULT_KEYS)
                if key in ("command", "depends_on"):
                    hint = f"'{key}' belongs to each job, not to defaults"
                self.report(entry[1], f"unknown key '{key_text(key)}' in defaults", hint)
                continue
            slot, read = readers[key]
            try:
                self.template[slot] = read(entry)
            except FieldError as bad:
                self.report(bad.line, f"defaults: {bad.message}", bad.hint)
            for more in self.fields.extra:
                self.report(more.line, f"defaults: {more.message}", more.hint)
            self.fields.extra.clear()
        nb, dl = self.template[SLOT["not_before"]], self.template[SLOT["deadline"]]
        shut = closed_window(nb, dl) if nb and dl else None
        if shut is not None:
            where = given.get("deadline") or given.get("not_before")
            self.report(where[1] if where else None, f"defaults: {shut[0]}", shut[1])

"""The `jobs` section of a plan: JobSpecs read from YAML events, and upstream rows."""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

from yaml.events import (
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)

from wloadctl.core.durations import closed_window, format_duration
from wloadctl.core.plan import DynamicItems, JobSpec
from wloadctl.core.planfields import JOB_KEYS, SLA_NAMES, FieldReader
from wloadctl.core.planvalues import FieldError, first_repeated, key_hint, key_text
from wloadctl.core.yamltree import (
    Entry,
    TreeReader,
    YamlEvent,
    describe,
    line_of,
    resolve_plain,
)

FIELDS: list[str] = [f.name for f in dataclasses.fields(JobSpec)]
"""JobSpec's fields in constructor order: a job is built as a list, then unpacked."""

SLOT: dict[str, int] = {name: i for i, name in enumerate(FIELDS)}
"""Position of each JobSpec field in that list."""

_ID, _COMMAND, _DEPS, _KINDS = (
    SLOT["id"],
    SLOT["command"],
    SLOT["depends_on"],
    SLOT["dep_kinds"],
)
_TYPE, _SLA, _LINE = SLOT["type"], SLOT["sla"], SLOT["line"]
_NOT_BEFORE, _DEADLINE = SLOT["not_before"], SLOT["deadline"]
_EXPECTED, _TIMEOUT = SLOT["expected"], SLOT["timeout"]
# Job keys whose JobSpec field or FieldReader method has another name.
_KEY_FIELD = {"retries": "retry", "if": "condition"}
_KEY_METHOD = {"type": "job_type", "if": "condition"}
_VALUE = attrgetter("value")
_MARK_LINE = attrgetter("start_mark.line")

T = TypeVar("T")


def spec_maker(cls: type[T], fixed: dict[str, Any] | None = None) -> Callable[..., T]:
    """`cls(*values)`, or an equal but cheaper way to build the same object.

    A frozen dataclass's __init__ stores each field through object.__setattr__;
    at two dozen fields and a million jobs that costs seconds. Here each field
    is stored on a fresh instance of a mutable class with the very same slots
    (plain attribute stores, which the interpreter makes fast), and the
    instance then takes `cls` as its class: an object identical to
    `cls(*values)` for about half the cost of storing the slots through their
    descriptors. This holds only while the class stays a frozen, slotted
    dataclass with no __post_init__; otherwise the class itself is returned.

    Args:
        cls: the dataclass to build.
        fixed: fields whose value is the same for every object built (the
            plan's defaults): the callable then takes only the other fields,
            in field order.

    Returns:
        A callable taking every field's value (but the fixed ones), in field order.
    """
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    plain = (
        not hasattr(cls, "__post_init__")
        and list(getattr(cls, "__slots__", ())) == names
        and all(f.init for f in fields)
        and cls.__bases__ == (object,)
    )
    if not plain:
        return cls if not fixed else _with_fixed(cls, names, fixed)
    draft = type(f"_{cls.__name__}Draft", (), {"__slots__": tuple(names)})
    space: dict[str, Any] = {"new": object.__new__, "draft": draft, "cls": cls}
    fixed = fixed or {}
    space.update((f"k_{i}", fixed[name]) for i, name in enumerate(names) if name in fixed)
    params = ", ".join(f"v_{i}" for i, name in enumerate(names) if name not in fixed)
    stores = "".join(
        f"    spec.{name} = {'k' if name in fixed else 'v'}_{i}\n" for i, name in enumerate(names)
    )
    exec(
        f"def make({params}):\n    spec = new(draft)\n{stores}    spec.__class__ = cls\n    return spec\n",
        space,
    )
    make: Callable[..., T] = space["make"]
    return make


def _with_fixed(cls: type[T], names: list[str], fixed: dict[str, Any]) -> Callable[..., T]:
    """`cls` called with the fixed fields filled in (for a class the fast way does not fit)."""
    free = [name for name in names if name not in fixed]

    def make(*values: Any) -> T:
        return cls(**fixed, **dict(zip(free, values, strict=True)))

    return make


MAKE_SPEC = spec_maker(JobSpec)
"""Builds a JobSpec from its field values in FIELDS order."""

USUAL_FIELDS = ("id", "command", "depends_on", "dep_kinds", "sla", "line")
"""The fields a usual job line sets itself (in FIELDS order); the defaults give the rest."""

Report = Callable[..., None]
"""report(line, message, hint=None, job=None, kind=WloadError)."""


def where_line(where: int | YamlEvent) -> int:
    """A 1-based line from a line number or from the event of the node."""
    return where if isinstance(where, int) else line_of(where)


class JobsReader:
    """Builds the JobSpecs of a plan and its upstream rows as compact integer arrays.

    The common shapes of a job (a mapping of plain keys with a quoted command,
    a flow list of dependencies, a tier name) are read straight from parser
    events; anything else (anchors, aliases, merges, tags, unusual types) goes
    through the general tree reader. At a million jobs the difference is
    several times the load time.
    """

    def __init__(
        self, fields: FieldReader, template: list[Any], report: Report
    ) -> None:
        """Prepare to read jobs, each starting from `template` (the defaults)."""
        self.fields = fields
        """Reads single fields, sharing equal values."""
        self.template = template
        """JobSpec values before a job's own settings are applied."""
        self.report = report
        """Receives each problem."""
        self.readers: dict[str, tuple[int, Callable[[Entry], Any]]] = {
            key: (
                SLOT[_KEY_FIELD.get(key, key)],
                getattr(fields, _KEY_METHOD.get(key, key)),
            )
            for key in JOB_KEYS
            if key != "depends_on"
        }
        """Job key -> (JobSpec slot, reader method)."""
        self.jobs: dict[str, JobSpec] = {}
        self.bad_ids = 0
        """Jobs left out for an id that is not text (told each; the plan is not also told it has no jobs)."""
        """The jobs read so far, by id."""
        self.ids: list[str] = []
        """Job ids by index."""
        self.index: dict[str, int] = {}
        """Index by job id."""
        self.up_off = array("i", [0])
        """Upstream row offsets."""
        self.up = array("i")
        """Upstream rows (forward references hold -1 until check_jobs resolves them)."""
        self.pending: list[tuple[int, str, int | YamlEvent, str]] = []
        """Forward references: (position in `up`, upstream id, where, job id)."""
        self.conditional: list[str] = []
        """Jobs given an `if` of their own (the defaults' `if` applies to all)."""
        self.iterated: list[tuple[str, int]] = []
        """Jobs given a `max_iterations` of their own, with its line: each needs an `until`."""
        self.looping: set[str] = set()
        """Jobs given an `until`, right or wrong (a wrong one is reported once)."""
        self.over_vars: list[str] = []
        """Jobs given a `for_each: vars.NAME` of their own: the variable is checked once all are read."""
        self.var_caps: dict[str, int] = {}
        """Of those, the ones given a `max_items` (`for_each: {items: vars.NAME, max_items: N}`): the cap."""
        self.bad_loops: set[str] = set()
        """Jobs given a `for_each` that is wrong (reported): no more is said of their `{item}`."""
        self.repeated: list[tuple[int, str]] = []
        """(line, id) of each job whose id a job above it has already (reported, and not kept)."""
        self._index_get = self.index.get
        self._id_at = self.ids.__getitem__
        self._shared = fields.shared
        self._usual: Callable[..., JobSpec] | None = None

    def usual_maker(self) -> Callable[..., JobSpec]:
        """Builds a JobSpec from the USUAL_FIELDS, the rest taken from the template.

        The template must be final (it is, once the first job is read): the
        maker is made once per plan and keeps its values.
        """
        if self._usual is None:
            template = self.template
            fixed = {name: template[SLOT[name]] for name in FIELDS if name not in USUAL_FIELDS}
            self._usual = spec_maker(JobSpec, fixed)
        return self._usual

    def read(self, reader: TreeReader, start: YamlEvent, line: int) -> None:
        """Read the `jobs` mapping whose first event is `start` (key on `line`)."""
        if type(start) is MappingStartEvent:
            anchor = start.anchor
            if anchor is not None:
                reader.open.add(anchor)  # (an alias of it inside is told so)
            self._stream(reader)
            if anchor is not None:
                reader.open.discard(anchor)
            if not self.jobs and not self.bad_ids:
                self.report(
                    line,
                    "the plan has no jobs",
                    "add jobs under 'jobs:' as job id -> job",
                )
            return
        entry = reader.node(start)
        if entry[0] is None or entry[0] == [] or entry[0] == {}:
            self.report(
                line, "the plan has no jobs", "add jobs under 'jobs:' as job id -> job"
            )
        elif type(entry[0]) is dict:
            for jid, job in entry[0].items():
                self.add_entry(jid, job[1], job)
        else:
            self.report(
                line,
                f"jobs must be a mapping of job id -> job, not {describe(entry[0])}",
            )

    def _stream(self, reader: TreeReader) -> None:
        """The loop over every job; its MappingStartEvent was just consumed.

        This is where a million-job plan spends its time, so names are bound
        to locals and the usual settings are taken straight from the events.
        """
        next_event = reader.next
        node = reader.node
        template = self.template
        shared_get = self.fields.shared.get
        share = self.fields.share
        sla_names = SLA_NAMES
        add = self.add
        index, ids, jobs, up = self.index, self.ids, self.jobs, self.up
        index_get, id_at, ids_append = index.get, ids.__getitem__, ids.append
        up_extend, up_off_append = up.extend, self.up_off.append
        make = MAKE_SPEC
        mark_line = _MARK_LINE
        merges: list[Entry] = []
        while True:
            ev = next_event()
            if ev.__class__ is not ScalarEvent:
                if ev.__class__ is MappingEndEvent:
                    if merges:
                        self._merge_jobs(reader, merges)
                    return
                self._skip_key(reader, ev, None)
                continue
            jid = ev.value
            jline = mark_line(ev) + 1
            if ev.anchor is not None or jid == "<<":
                if ev.anchor is not None:
                    # (an alias of the id, in a depends_on, is that id)
                    reader.anchors[ev.anchor] = (jid, jline, jid)
                if jid == "<<" and ev.implicit[0]:
                    merges.append(node(next_event()))
                    continue
            ev = next_event()
            if (
                ev.__class__ is not MappingStartEvent
                or ev.anchor is not None
                or ev.tag is not None
            ):
                entry = node(ev)
                self.add_entry(jid, jline, (entry[0], jline, entry[2]))
                continue
            vals = template.copy()
            vals[_ID] = jid
            vals[_LINE] = jline
            deps: list[YamlEvent] | tuple[list[str], list[int | YamlEvent]] | None = (
                None
            )
            others: list[tuple[YamlEvent, Entry]] | None = None
            keys: list[YamlEvent] = []
            while True:
                k = next_event()
                if k.__class__ is not ScalarEvent:
                    if k.__class__ is MappingEndEvent:
                        break
                    self._skip_key(reader, k, jid)
                    continue
                keys.append(k)
                key = k.value
                v = next_event()
                if v.__class__ is ScalarEvent:
                    if v.anchor is None and v.tag is None:
                        if key == "command":
                            text = v.value
                            # Unquoted text may be a number or a boolean to
                            # YAML: those go the general way, to be refused.
                            if not v.implicit[0] or resolve_plain(text) is text:
                                command = shared_get(text)
                                if command is None and text.strip():
                                    command = share(text)
                                if command is not None:
                                    vals[_COMMAND] = command
                                    continue
                        elif key == "sla":
                            tier = sla_names.get(v.value)
                            if tier is not None:
                                vals[_SLA] = tier
                                continue
                elif (
                    v.__class__ is SequenceStartEvent
                    and key == "depends_on"
                    and v.anchor is None
                    and v.tag is None
                ):
                    devs: list[YamlEvent] = []
                    while True:
                        d = next_event()
                        if d.__class__ is ScalarEvent and d.anchor is None:
                            devs.append(d)
                        elif d.__class__ is SequenceEndEvent:
                            deps = devs
                            break
                        else:
                            deps = self._dep_rest(reader, jid, devs, d)
                            break
                    vals[_KINDS] = None
                    continue
                if others is None:
                    others = []
                others.append((k, node(v)))
            if len(keys) > 1 and len(set(map(_VALUE, keys))) < len(keys):
                self.report_repeats(jid, [(k.value, line_of(k)) for k in keys])
            if others is not None:
                deps = self._apply_others(reader, vals, jid, others, keys, deps)
            if type(deps) is not list:
                add(jid, jline, vals, *(deps or (None, None)))
                continue
            if jid in index or (vals[_COMMAND] is None and vals[_TYPE] == "shell"):
                add(jid, jline, vals, list(map(_VALUE, deps)), deps)
                continue
            # What follows is `_add` for a job with a plain list of upstream
            # ids, kept inline: it runs once per job.
            if deps:
                found: list[Any] = list(map(index_get, map(_VALUE, deps)))
                if None in found:
                    add(jid, jline, vals, list(map(_VALUE, deps)), deps)
                    continue
                up_extend(found)
                vals[_DEPS] = tuple(map(id_at, found))
                if len(found) > 1 and len(set(found)) < len(found):
                    self.report_twice(jid, jline, list(map(_VALUE, deps)))
            if others is not None:
                self.check_window(jid, jline, vals)
            up_off_append(len(up))
            index[jid] = len(ids)
            ids_append(jid)
            jobs[jid] = make(*vals)

    def _merge_jobs(self, reader: TreeReader, merges: list[Entry]) -> None:
        """Add the jobs that `<<` merge keys of the jobs mapping give, but those its own keys give.

        As YAML merges: a job id written in the mapping itself wins over a merged one, wherever the `<<` is.
        """
        for jid, job in reader.merged({}, merges).items():
            if jid not in self.index:
                self.add_entry(jid, job[1], job)

    def _skip_key(self, reader: TreeReader, ev: YamlEvent, jid: str | None) -> None:
        """Consume and report a key that is a list or mapping, with its value."""
        where = line_of(ev)
        reader.node(ev)
        reader.node(reader.next())
        if jid is None:
            self.bad_ids += 1
            self.report(
                where, "a job id must be plain text", "write ids like load_accounts_01"
            )
        else:
            self.report(where, "a job setting's key must be plain text", job=jid)

    def report_repeats(self, jid: str, keys: list[tuple[str, int]]) -> None:
        """Report each key of a job that was given before, from its (key, line) pairs."""
        first: dict[str, int] = {}
        for key, line in keys:
            if key in first:
                self.report(
                    line,
                    f"duplicate key '{key}' (first at line {first[key]})",
                    "YAML keeps only the last one; remove one of them",
                    job=jid,
                )
            else:
                first[key] = line

    def _dep_rest(
        self, reader: TreeReader, jid: str, devs: list[YamlEvent], odd: YamlEvent
    ) -> tuple[list[str], list[int | YamlEvent]]:
        """Finish a dependency list that holds something other than plain ids."""
        names: list[str] = [d.value for d in devs]
        wheres: list[int | YamlEvent] = list(devs)
        ev = odd
        while ev.__class__ is not SequenceEndEvent:
            entry = reader.node(ev)
            if entry[2] is None or entry[0] is None:
                self.report(
                    entry[1],
                    f"depends_on items must be job ids, not {describe(entry[0])}",
                    job=jid,
                )
            else:
                names.append(entry[2])
                wheres.append(entry[1])
            ev = reader.next()
        return names, wheres

    def _apply_others(
        self,
        reader: TreeReader,
        vals: list[Any],
        jid: str,
        others: list[tuple[YamlEvent, Entry]],
        keys: list[YamlEvent],
        deps: list[YamlEvent] | tuple[list[str], list[int | YamlEvent]] | None,
    ) -> list[YamlEvent] | tuple[list[str], list[int | YamlEvent]] | None:
        """Apply the settings read as general entries, then any `<<` merges."""
        merges: list[Entry] = []
        for k, entry in others:
            line = line_of(k)
            if k.value == "<<" and k.implicit[0]:
                merges.append(entry)
            elif k.value == "depends_on":
                deps = self.apply_deps(vals, jid, (entry[0], line, entry[2])) or deps
            else:
                self.apply(vals, jid, k.value, (entry[0], line, entry[2]))
        if merges:
            own = {k.value for k in keys}
            for key, entry in reader.merged({}, merges).items():
                if key in own:
                    continue
                if key == "depends_on":
                    deps = self.apply_deps(vals, jid, entry) or deps
                else:
                    self.apply(vals, jid, key, entry)
        return deps

    def apply(self, vals: list[Any], jid: str, key: str, entry: Entry) -> None:
        """Set one job field from a general entry, reporting what is wrong with it."""
        found = self.readers.get(key)
        if found is None:
            self.report(
                entry[1], f"unknown key '{key_text(key)}'", key_hint(key, JOB_KEYS), job=jid
            )
            return
        if key == "until":
            self.looping.add(jid)
        try:
            vals[found[0]] = found[1](entry)
            if (key == "if" or (key == "for_each" and isinstance(vals[found[0]], DynamicItems))) and (
                    not self.conditional or self.conditional[-1] != jid):
                self.conditional.append(jid)
            elif key == "max_iterations":
                self.iterated.append((jid, entry[1]))
            elif key == "for_each" and type(vals[found[0]]) is str:
                self.over_vars.append(jid)
                if type(entry[0]) is dict and "max_items" in entry[0]:
                    self.var_caps[jid] = int(entry[0]["max_items"][0])  # (a whole number: for_each checked it)
        except FieldError as bad:
            self.report(bad.line, bad.message, bad.hint, job=jid)
            if key == "command":
                # A wrong command is still a command: "no command" would be false.
                vals[_COMMAND] = ""
            elif key == "for_each":
                self.bad_loops.add(jid)  # (its {item} is no command without a loop: the loop is what is wrong)
        extra = self.fields.extra
        if extra:
            for more in extra:
                self.report(more.line, more.message, more.hint, job=jid)
            extra.clear()

    def apply_deps(
        self, vals: list[Any], jid: str, entry: Entry
    ) -> tuple[list[str], list[int | YamlEvent]] | None:
        """Set a job's dependency kinds from a general entry; (ids, their lines) or None."""
        try:
            names, lines, vals[_KINDS] = self.fields.depends_on(entry)
        except FieldError as bad:
            self.report(bad.line, bad.message, bad.hint, job=jid)
            return None
        return names, list(lines)

    def add_entry(self, jid: str, line: int, entry: Entry) -> None:
        """Add a job given as a general entry (aliases, anchors, tags, bad values)."""
        fields = entry[0]
        vals = self.template.copy()
        vals[_ID] = jid
        vals[_LINE] = line
        if type(fields) is not dict:
            if fields is not None:
                self.report(
                    line,
                    f"a job must be a mapping of its settings, not {describe(fields)}",
                    "write 'command: ...' and the other settings under the job's id",
                    job=jid,
                )
                vals[_COMMAND] = ""
            fields = {}
        names: list[str] = []
        wheres: list[int | YamlEvent] = []
        for key, field in fields.items():
            if key == "depends_on":
                got = self.apply_deps(vals, jid, field)
                if got is not None:
                    names, wheres = got
            else:
                self.apply(vals, jid, key, field)
        self.add(jid, line, vals, names, wheres)

    def add(
        self,
        jid: str,
        line: int,
        vals: list[Any],
        names: list[str] | None,
        wheres: list[int | YamlEvent] | None,
    ) -> None:
        """Check the finished job, record its edges and keep it."""
        index = self.index
        if jid in index:
            self.repeated.append((line, jid))
            self.report(
                line,
                f"duplicate job id '{jid}' (first at line {self.jobs[jid].line})",
                "YAML keeps only the last one; give each job its own id",
                job=jid,
            )
            return
        if vals[_COMMAND] is None and vals[_TYPE] == "shell":
            self.report(
                line,
                "the job has no command",
                "add 'command: ...', or 'type: noop' for a job that only joins others",
                job=jid,
            )
        self.check_window(jid, line, vals)
        if names:
            # Upstream jobs usually come first in the file: resolve them all
            # with C-level map calls, and take the slow path only when one is
            # not known yet (or is the job itself).
            found: list[Any] = list(map(self._index_get, names))
            if None in found:
                vals[_DEPS] = self._link_slowly(jid, names, wheres or [])
            else:
                self.up.extend(found)
                # The upstream's own id string replaces the parsed copy.
                vals[_DEPS] = tuple(map(self._id_at, found))
                if len(found) > 1 and len(set(found)) < len(found):
                    self.report_twice(jid, line, names)
        self.up_off.append(len(self.up))
        index[jid] = len(self.ids)
        self.ids.append(jid)
        self.jobs[jid] = MAKE_SPEC(*vals)

    def check_window(self, jid: str, line: int, vals: list[Any]) -> None:
        """Report a job whose not-before is at or after its deadline (see closed_window), or whose expected duration
        is longer than its timeout."""
        nb, dl = vals[_NOT_BEFORE], vals[_DEADLINE]
        if nb and dl and (nb is not self.template[_NOT_BEFORE] or dl is not self.template[_DEADLINE]):
            # (a pair both taken from the defaults is told once, where the defaults give it)
            shut = closed_window(nb, dl)
            if shut is not None:
                self.report(line, shut[0], shut[1], job=jid)
        ex, to = vals[_EXPECTED], vals[_TIMEOUT]
        if ex and to and ex > to and (ex is not self.template[_EXPECTED] or to is not self.template[_TIMEOUT]):
            self.report(line, f"expected {format_duration(ex)} is longer than its timeout {format_duration(to)}: the "
                        "job would be killed before it is expected to end",
                        "give a timeout longer than the expected duration, or a shorter expected", job=jid)

    def _link_slowly(
        self, jid: str, names: list[str], wheres: list[int | YamlEvent]
    ) -> tuple[str, ...]:
        """Record edges one by one, keeping forward references for `finish`."""
        up, ids = self.up, self.ids
        if len(names) > 1 and len(set(names)) < len(names):
            self.report_twice(jid, where_line(wheres[0]), names)
        for pos, name in enumerate(names):
            i = self.index.get(name)
            if i is not None:
                names[pos] = ids[i]
                up.append(i)
            elif name == jid:
                self.report(
                    where_line(wheres[pos]),
                    "the job depends on itself",
                    "remove it from its own depends_on",
                    job=jid,
                )
            else:
                self.pending.append((len(up), name, wheres[pos], jid))
                up.append(-1)
        return tuple(names)

    def report_twice(self, jid: str, line: int, names: list[str]) -> None:
        """Report the first upstream id that `names` lists twice."""
        dup = first_repeated(names)
        self.report(
            line,
            f"depends on '{dup}' more than once",
            "list each upstream once",
            job=jid,
        )

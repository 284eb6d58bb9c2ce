"""Checks across a plan's jobs once all are read: ids, upstreams, cycles, conditions."""

from __future__ import annotations

import ast
import difflib
import re
from array import array
from collections.abc import Collection, Mapping
from operator import attrgetter

from wloadctl.core.argvcode import code_arguments
from wloadctl.core.condition import job_field, parse_condition
from wloadctl.core.dag import cycle_in, cycle_text, reverse_kahn
from wloadctl.core.loops import PLACEHOLDER, items_of
from wloadctl.core.plan import EXEC_ARG_MAX, EXEC_TOTAL_MAX, JOB_ID_MAX, DynamicItems, JobSpec
from wloadctl.core.planfields import JOB_ID
from wloadctl.core.planjobs import SLOT, JobsReader, where_line
from wloadctl.errors import CycleError, WloadError

# Checking all ids with one regex over their space-joined text is far cheaper
# than a match per id; the count of spaces proves no id held a space itself.
_ALL_IDS = re.compile(r"[A-Za-z0-9_.:-]+(?: [A-Za-z0-9_.:-]+)*")
# A command shorter than this (in characters, so at most 4 times as many bytes)
# cannot break a limit of exec alone: only its env is then counted.
_SHORT_COMMAND = 4096
# Suggesting a close id compares with every id; past this many it costs too much.
_SUGGEST_LIMIT = 20000
_SUGGESTED = 20
"""Unknown dependency names given a `did you mean` (each costs a comparison with every id: a plan that names
thousands of unknown jobs, a renamed one say, would take minutes to refuse; the first ones shown say enough)."""
_COMMAND, _ENV, _CWD, _TYPE = attrgetter("command"), attrgetter("env"), attrgetter("cwd"), attrgetter("type")


def check_jobs(jobs: JobsReader, variables: Collection[str] | None = None) -> None:
    """Finish a plan's jobs: check ids, resolve forward references, find a cycle.

    Unknown upstream ids are reported and their edges dropped, so the cycle
    search and the checks of conditions see only real edges. Problems go to
    the reader's `report`.

    Args:
        jobs: the reader, after the whole `jobs` mapping was read.
        variables: the names declared under the plan's `variables` (None: they could not be read, and
            what the expressions read of them is not checked).
    """
    _check_ids(jobs)
    acyclic = not jobs.pending
    _resolve(jobs)
    n = len(jobs.ids)
    # Every edge recorded while reading names a job read before: with no
    # forward reference, each edge points to a lower index and no cycle can
    # close. Ordering a million jobs only to find that out costs seconds.
    order, left = ([], bytearray()) if acyclic else reverse_kahn(n, jobs.up_off, jobs.up)
    if not acyclic and len(order) < n:
        loop = [jobs.ids[i] for i in cycle_in(n, jobs.up_off, jobs.up, left)]
        first = jobs.jobs[loop[0]]
        jobs.report(
            first.line,
            f"dependency cycle: {cycle_text(loop)}",
            "each job depends on the next; remove one of these dependencies",
            job=first.id,
            kind=CycleError,
        )
    _check_conditions(jobs)
    if variables is not None:
        _check_variables(jobs, variables)
        if jobs.over_vars and isinstance(variables, Mapping):
            _check_loop_variables(jobs, variables)
    _check_commands(jobs, variables or ())
    for jid, line in jobs.iterated:
        if not jobs.jobs[jid].until and jid not in jobs.looping:
            jobs.report(line, "max_iterations without until: the job runs once",
                        "add an until (e.g. until: result.ready == 1) or remove max_iterations", job=jid)


def _check_commands(jobs: JobsReader, variables: Collection[str]) -> None:
    """A noop job has no command. Each job's command and env must fit what a process can be started with
    (EXEC_ARG_MAX, EXEC_TOTAL_MAX), and hold no NUL byte, nor its cwd; its placeholders must be ones that are
    replaced (_check_placeholders).

    Past them the executor's exec fails ("Argument list too long") or, far past, the payload does not fit
    the run's arena and the scheduler stops: both only once the run is under way. A NUL byte (YAML's "\\0"
    in double quotes) ends a C string: no process can be given one in its arguments, environment or path.
    """
    if _all_plain(jobs.jobs.values()):
        return
    # Envs are shared between jobs (defaults, interning): each distinct one is measured once.
    env_bytes: dict[int, tuple[int, str | None]] = {}
    env_braced: dict[int, bool] = {}
    for jid, spec in jobs.jobs.items():
        command, env = spec.command, spec.env
        if command is not None and spec.type == "noop":
            # Its command would never run, and nothing would say so.
            jobs.report(spec.line, "a noop job runs no command, but this one has one",
                        "remove the command, or give the job type: shell" + (
                            ", as the defaults' type: noop holds for every job without one"
                            if jobs.template[SLOT["type"]] == "noop" else ""), job=jid)
            continue
        if env:
            braced = env_braced.get(id(env))
            if braced is None:
                braced = env_braced[id(env)] = any("{" in v for _n, v in env)
        else:
            braced = False
        if braced or (spec.cwd and "{" in spec.cwd) or (command is not None and (
                "{" in command if type(command) is str else any("{" in w for w in command))):
            _check_placeholders(jobs, jid, spec, variables)
        if _has_nul(command, env, spec.cwd):
            _report_nul(jobs, jid, spec)
            continue
        if env:
            known = env_bytes.get(id(env))
            if known is None:
                known = env_bytes[id(env)] = _env_size(env)
            size, too_long = known
        else:
            size, too_long = 0, None
        if type(command) is str and len(command) < _SHORT_COMMAND and not size and too_long is None:
            continue
        _check_exec_size(jobs, jid, spec, size, too_long)


def _all_plain(specs: Collection[JobSpec]) -> bool:
    """Whether no job can have a problem _check_commands looks for: no env, cwd or noop job, and every
    distinct command (commands are shared between jobs) a short text without braces or a NUL byte.

    A few passes over the jobs in C instead of a statement per job: most plans, and every plan `gen`
    writes, are so.
    """
    if any(map(_ENV, specs)) or any(map(_CWD, specs)) or "noop" in set(map(_TYPE, specs)):
        return False
    return all(c is None or (type(c) is str and len(c) < _SHORT_COMMAND and "{" not in c and "\0" not in c)
               for c in set(map(_COMMAND, specs)))


_BRACED = re.compile(r"(?<!\$)\{((?:vars\.)?[A-Za-z_][A-Za-z0-9_]*)\}")
"""A `{word}` that is not a shell's `${word}`: where wloadctl's placeholder `{item}`, a misspelling of it, or a
plan variable taken for a placeholder (`{vars.region}`, `{region}`) stands."""


def _check_placeholders(jobs: JobsReader, jid: str, spec: JobSpec, variables: Collection[str]) -> None:
    """`{item}` is replaced only in a `for_each` job's command, cwd and env values: elsewhere, or misspelt
    (`{itm}`), the braces and the word would reach the program as they are, and so would a plan variable's
    `{vars.NAME}` or `{NAME}` (plan variables are read by `if`, `until` and `for_each` alone). Shell text
    (`${HOME}`, `{a,b}`, `{ cmd; }`) and JSON are no such word and pass. In an argv command, `{item}` may not
    stand in another language's program (`python -c`, `perl -e`, awk's): it would be code there."""
    places: list[tuple[str, list[str]]] = []
    if spec.command is not None:
        places.append(("the command", [spec.command] if type(spec.command) is str else list(spec.command)))
    if spec.cwd and "{" in spec.cwd:
        places.append(("cwd", [spec.cwd]))
    places.extend((f"env '{name}'", [value]) for name, value in spec.env if "{" in value)
    looped = spec.for_each is not None
    for where, words in places:
        found = {m[1] for w in words for m in _BRACED.finditer(w)}
        for word in sorted(found):
            name = word.removeprefix("vars.")
            if word.startswith("vars.") or (name in variables and name != "item"):
                env_name = name.upper() if name.isidentifier() else "NAME"
                jobs.report(spec.line, f"{where} holds '{{{word}}}', which is never replaced: plan variables do "
                            "not reach commands, cwd or env", f"give the job env: {{{env_name}: ...}} (a YAML "
                            f"anchor shares one value between jobs) and read ${env_name}", job=jid)
            elif word == "item" and not looped and jid not in jobs.bad_loops:
                jobs.report(spec.line, f"{where} holds {PLACEHOLDER}, but the job has no for_each: it would run "
                            f"with the text '{PLACEHOLDER}'",
                            f"add for_each (a list, vars.NAME or an upstream's output), or remove {PLACEHOLDER}",
                            job=jid)
            elif looped and word != "item" and difflib.SequenceMatcher(None, word.lower(), "item").ratio() >= 0.75:
                jobs.report(spec.line, f"{where} holds '{{{word}}}', which is not replaced: it would run as it is",
                            f"did you mean '{PLACEHOLDER}'? a for_each job's command, cwd and env name its item so",
                            job=jid)
    if looped and type(spec.command) is tuple and any(PLACEHOLDER in w for w in spec.command):
        _, code = code_arguments(spec.command)
        for k in sorted(code):
            if PLACEHOLDER in spec.command[k]:
                jobs.report(spec.line, f"argument {k + 1} of the command is {code[k]}: {PLACEHOLDER} there would "
                            "be run as code, not read as text",
                            "pass the item as an argument of its own that the program reads (python's sys.argv, "
                            f"perl's @ARGV, awk -v NAME={PLACEHOLDER}), or read $WLOADCTL_ITEM in the program",
                            job=jid)


def _has_nul(command: str | tuple[str, ...] | None, env: tuple[tuple[str, str], ...], cwd: str | None) -> bool:
    # One scan of each text in C: this runs for every job of a million-job plan.
    if type(command) is str:
        if "\0" in command:
            return True
    elif command and any("\0" in w for w in command):
        return True
    return bool(cwd and "\0" in cwd) or bool(env and any("\0" in v for _n, v in env))


def _report_nul(jobs: JobsReader, jid: str, spec: JobSpec) -> None:
    hint = "no process can be given one; in YAML, \"\\0\" in double quotes is a NUL byte"
    words = [spec.command] if type(spec.command) is str else list(spec.command or ())
    if any("\0" in w for w in words):
        what = "the command" if type(spec.command) is str else "an argument of the command"
        jobs.report(spec.line, f"{what} holds a NUL byte", hint, job=jid)
    for name, value in spec.env:
        if "\0" in value:
            jobs.report(spec.line, f"env '{name}' holds a NUL byte", hint, job=jid)
    if spec.cwd and "\0" in spec.cwd:
        jobs.report(spec.line, "cwd holds a NUL byte", "no path can hold one; in YAML, \"\\0\" in double quotes "
                    "is a NUL byte", job=jid)


def _env_size(env: tuple[tuple[str, str], ...]) -> tuple[int, str | None]:
    """Bytes the env takes at exec, and the name of a variable too long to pass (or None)."""
    size, too_long = 0, None
    for name, value in env:
        n = len(name.encode()) + len(value.encode()) + 2
        if n > EXEC_ARG_MAX and too_long is None:
            too_long = name
        size += n + 8
    return size, too_long


def _check_exec_size(jobs: JobsReader, jid: str, spec: JobSpec, env_size: int, too_long: str | None) -> None:
    if too_long is not None:
        jobs.report(spec.line, f"env '{too_long}' is longer than a process can be given",
                    f"the OS passes at most {EXEC_ARG_MAX - 1:,} bytes of NAME=value: pass a file instead",
                    job=jid)
        return
    words = [spec.command] if type(spec.command) is str else list(spec.command or ())
    sizes = [len(w.encode()) + 1 for w in words]
    longest = max(sizes, default=0)
    if longest > EXEC_ARG_MAX:
        what = "the command" if type(spec.command) is str else "an argument of the command"
        jobs.report(spec.line, f"{what} is {longest - 1:,} bytes long, more than a process can be given",
                    f"the OS passes at most {EXEC_ARG_MAX - 1:,} bytes in one argument: put it in a script",
                    job=jid)
        return
    total = sum(sizes) + 8 * len(sizes) + env_size
    if total > EXEC_TOTAL_MAX:
        jobs.report(spec.line, f"the command and env take {total:,} bytes, more than a process can be given",
                    f"a job may pass at most {EXEC_TOTAL_MAX:,}: the OS's ARG_MAX of 2 MiB, less room for the "
                    "run's own environment; put them in a script or a file", job=jid)


def _resolve(jobs: JobsReader) -> None:
    """Fill in forward references; report and drop the ones that name no job."""
    up, up_off, ids = jobs.up, jobs.up_off, jobs.ids
    missing = False
    hints: dict[str, str] = {}  # by unknown name: many jobs may name the same one
    for pos, name, where, jid in jobs.pending:
        i = jobs.index.get(name)
        if i is not None:
            up[pos] = i
            continue
        missing = True
        if not name:
            # (a `-` with nothing after it in a depends_on list, or ''): "unknown job ''" would name no mistake
            jobs.report(where_line(where), "depends_on lists an empty item",
                        "remove it, or write the id of the upstream job", job=jid)
            continue
        hint = hints.get(name)
        if hint is None:
            hint = f"no job '{name}' in this plan"
            if len(ids) <= _SUGGEST_LIMIT and len(hints) < _SUGGESTED:
                close = difflib.get_close_matches(name, ids, n=1)
                if close:
                    hint = f"did you mean '{close[0]}'?"
            hints[name] = hint
        jobs.report(
            where_line(where), f"depends on unknown job '{name}'", hint, job=jid
        )
    if missing:
        kept = array("i")
        offsets = array("i", [0])
        for v in range(len(ids)):
            kept.extend(u for u in up[up_off[v] : up_off[v + 1]] if u >= 0)
            offsets.append(len(kept))
        jobs.up, jobs.up_off = kept, offsets


def _check_conditions(jobs: JobsReader) -> None:
    """Each job an `if` or a `for_each` over output reads must be upstream of it, or its outcome is unknown then."""
    everyone = jobs.template[SLOT["condition"]] is not None
    ancestry = _Ancestry(jobs)
    for jid in jobs.jobs if everyone else jobs.conditional:
        spec = jobs.jobs[jid]
        for text, what in ((spec.condition, "condition"),
                           (spec.for_each.expr if isinstance(spec.for_each, DynamicItems) else None, "for_each")):
            if text is None:
                continue
            cond = parse_condition(text)
            _check_loop_results(jobs, jid, spec.line, cond.tree, text, what)
            for name in sorted(cond.jobs):
                i = jobs.index.get(name)
                if i is None:
                    jobs.report(spec.line, f"the {what} reads unknown job '{name}'", job=jid)
                    continue
                if name == jid:
                    key = "if" if what == "condition" else what
                    jobs.report(spec.line, f"a job cannot read its own outcome in its {key} (jobs.{jid})",
                                "it is decided before the job runs; only until reads the job's own "
                                "result.KEY and exit_code", job=jid)
                    continue
                if not ancestry.above(i, jobs.index[jid]):
                    jobs.report(
                        spec.line,
                        f"the {what} reads job '{name}', which is not upstream of it",
                        f"add '{name}' to depends_on (or '{name}: done' for any outcome)",
                        job=jid,
                    )


def _check_loop_results(jobs: JobsReader, jid: str, line: int, tree: ast.AST, text: str, what: str) -> None:
    """A `for_each` job has no result of its own (each instance has its own): `jobs.LOOP.result.KEY` reads
    nothing whatever the instances wrote, so the `if` would be silently false."""
    loops = sorted({found[0] for node in ast.walk(tree) if (found := job_field(node)) is not None
                    and found[1] == "result" and found[0] in jobs.jobs and jobs.jobs[found[0]].for_each is not None})
    for name in loops:
        short = " ".join(text.split())
        jobs.report(line, f"the {what} '{short if len(short) <= 60 else short[:57] + '...'}' reads the result of "
                    f"'{name}', a for_each job, which has none (each instance has its own)",
                    f"read its state (jobs.{name}.state == 'SUCCEEDED'), or let a job after it gather the "
                    "instances' outcome and read that one's result", job=jid)


def _check_loop_variables(jobs: JobsReader, variables: Mapping[str, object]) -> None:
    """Each `for_each: vars.NAME` must name a declared list of text or numbers: reported with the plan's other
    problems (expanding the loops, after the checks, would find it only once every other one is fixed)."""
    names = sorted(str(k) for k in variables)
    values = dict(variables)
    for jid in jobs.over_vars:
        spec = jobs.jobs.get(jid)
        if spec is None or type(spec.for_each) is not str:
            continue
        name = spec.for_each.removeprefix("vars.").strip()
        if name not in variables:
            close = difflib.get_close_matches(name, names, n=1)
            hint = (f"did you mean 'vars.{close[0]}'? " if close else "") + (
                f"declared: {', '.join(names)}" if names else "declare it under `variables:` at the top as a list")
            jobs.report(spec.line, f"for_each reads undeclared variable '{name}'", hint, job=jid)
            continue
        try:
            items = items_of(spec, values)
        except WloadError as bad:
            jobs.report(spec.line, bad.message, bad.hint, job=jid)
            continue
        cap = jobs.var_caps.get(jid)
        if cap is not None and len(items) > cap:
            jobs.report(spec.line, f"for_each: {spec.for_each} lists {len(items)} items, more than max_items {cap}",
                        "raise max_items, or shorten the list", job=jid)


def _check_variables(jobs: JobsReader, declared: Collection[str]) -> None:
    """Each `vars.NAME` an `if`, `until` or `for_each` reads must be declared under `variables` (the plan's
    variables are all there are): an undeclared one reads as nothing, so a misspelt name would quietly turn a
    branch off or end a loop."""
    template = jobs.template
    everyone = template[SLOT["condition"]] is not None or template[SLOT["until"]] is not None
    names = sorted(str(k) for k in declared)
    undeclared: dict[str, list[str]] = {}  # by expression: defaults give every job the same one
    for jid in jobs.jobs if everyone else dict.fromkeys([*jobs.conditional, *sorted(jobs.looping)]):
        spec = jobs.jobs.get(jid)
        if spec is None:
            continue
        for text, what in ((spec.condition, "condition"), (spec.until, "until"),
                           (spec.for_each.expr if isinstance(spec.for_each, DynamicItems) else None, "for_each")):
            if text is None:
                continue
            if text not in undeclared:
                undeclared[text] = sorted(parse_condition(text).vars.difference(names))
            for name in undeclared[text]:
                close = difflib.get_close_matches(name, names, n=1)
                hint = (f"did you mean '{close[0]}'? " if close else "") + (
                    f"declared: {', '.join(names)}" if names else "declare it under `variables:` at the top")
                jobs.report(spec.line, f"the {what} reads undeclared variable '{name}'", hint, job=jid)


class _Ancestry:
    """Whether one job is upstream of another, for the jobs' conditions, in time near linear in the plan.

    Most conditions read a direct upstream (answered from the job's own list). Another job read for the first
    time is looked for upwards from the reader, stopping where it is found; one read by a second job gets the set
    of everything downstream of it, kept for the others (every job of a big plan may read one control job). Each
    reader's whole upstream closure, as this was done before, made a chain of 8,000 conditional jobs take 12 s.
    """

    def __init__(self, jobs: JobsReader) -> None:
        self.up, self.up_off = jobs.up, jobs.up_off
        self.asked: set[int] = set()
        """Jobs read once, not yet given their downstream set."""
        self.below: dict[int, set[int]] = {}
        """Everything downstream of a job read by more than one other."""
        self.down: list[list[int]] | None = None

    def above(self, u: int, d: int) -> bool:
        """Whether job u is upstream of job d."""
        up, up_off = self.up, self.up_off
        if u in up[up_off[d]:up_off[d + 1]]:
            return True
        below = self.below.get(u)
        if below is not None:
            return d in below
        if u in self.asked:
            below = self.below[u] = self._reach(u, self._down())
            return d in below
        self.asked.add(u)
        seen = {d}
        stack = [d]
        while stack:
            v = stack.pop()
            for w in up[up_off[v]:up_off[v + 1]]:
                if w == u:
                    return True
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return False

    def _down(self) -> list[list[int]]:
        if self.down is None:
            up, up_off = self.up, self.up_off
            down: list[list[int]] = [[] for _ in range(len(up_off) - 1)]
            for v in range(len(down)):
                for w in up[up_off[v]:up_off[v + 1]]:
                    down[w].append(v)
            self.down = down
        return self.down

    @staticmethod
    def _reach(start: int, edges: list[list[int]]) -> set[int]:
        seen: set[int] = set()
        stack = [start]
        while stack:
            for w in edges[stack.pop()]:
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return seen


def _check_ids(jobs: JobsReader) -> None:
    ids = jobs.ids
    joined = " ".join(ids)
    if _ALL_IDS.fullmatch(joined) and joined.count(" ") == len(ids) - 1 and max(map(len, ids), default=0) <= \
            JOB_ID_MAX and "." not in jobs.jobs and ".." not in jobs.jobs and not joined.startswith("-") and \
            " -" not in joined:
        return
    for jid in ids:
        if not JOB_ID.fullmatch(jid):
            bad = next((c for c in jid if not JOB_ID.fullmatch(c)), "")
            held = f": it holds '{bad}' (U+{ord(bad):04X})" if bad else ""
            jobs.report(
                jobs.jobs[jid].line,
                f"'{jid}' is not a valid job id{held}",
                "a job id is ASCII letters, digits and _ . : - only, as it names the job's files; "
                "other text can go in its description",
                job=jid,
            )
        elif jid in (".", ".."):
            jobs.report(jobs.jobs[jid].line, f"'{jid}' is not a valid job id",
                        "an id names the job's files, and this one names a folder: add a letter or a digit", job=jid)
        elif jid.startswith("-"):
            # (`wloadctl hold -x` reads it as an option, and a file named `-x` is one to `rm` or `tail`)
            jobs.report(jobs.jobs[jid].line, f"'{jid}' is not a valid job id: it starts with '-'",
                        "a command line would take it for an option: start it with a letter, a digit or '_'",
                        job=jid)
        elif len(jid) > JOB_ID_MAX:
            jobs.report(jobs.jobs[jid].line, f"the job id is {len(jid)} characters long",
                        f"at most {JOB_ID_MAX}: an id names the job's files", job=jid[:40] + "...")

"""`for_each` loops: one job instance per item, with dependents waiting for every instance."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from wloadctl.core.argvcode import code_arguments
from wloadctl.core.condition import ConditionError, parse_condition
from wloadctl.core.plan import JOB_ID_MAX, DynamicItems, JobSpec, Plan
from wloadctl.core.states import DepKind
from wloadctl.errors import PlanError, WloadError

ITEM_SEP = "@"
"""Instance ids are `<job>@<item>`."""
_SAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def items_of(spec: JobSpec, variables: dict[str, object]) -> tuple[str, ...]:
    """The items a `for_each` job runs for.

    Raises:
        WloadError: `vars.NAME` names no list variable, or the list is empty.
    """
    fe = spec.for_each
    if isinstance(fe, str):
        name = fe.removeprefix("vars.").strip()
        value = variables.get(name)
        if not isinstance(value, list) or not value:
            raise WloadError(f"for_each: {fe} is not a non-empty list variable", job=spec.id, line=spec.line,
                             hint="declare it under `variables:` as a list")
        bad = next((v for v in value if isinstance(v, list | dict)), None)
        if bad is not None:
            # As for an inline list: an item is one value. (Text of a nested value could also
            # be exponentially large: aliases of aliases share one list in memory.)
            raise WloadError(f"for_each: {fe} items must be text or numbers, not a {type(bad).__name__}",
                             job=spec.id, line=spec.line, hint="declare it under `variables:` as a list of names")
        return tuple(str(v) for v in value)
    if isinstance(fe, DynamicItems):
        raise TypeError(f"{spec.id}: the items of a for_each over upstream output come from output_items")
    if not fe:
        raise WloadError("for_each: the list of items is empty", job=spec.id, line=spec.line)
    return tuple(fe)


def instances_of(parent: JobSpec, specs: Sequence[JobSpec], index: Mapping[str, int]) -> list[int]:
    """The indices of a loop's instances: the jobs `<parent>@<item>` it waits for (it waits for its upstreams too)."""
    mine = parent.id + ITEM_SEP
    return [k for k in (index[d] for d in parent.depends_on if d.startswith(mine)) if specs[k].item is not None]


def instance_id(job: str, item: str) -> str:
    """The id of one instance: `<job>@<item>` with characters ids may not hold replaced by `_`; an item too long
    for the id to name files (JOB_ID_MAX) is cut, and a digest of it keeps the ids of such items apart.
    (Two items this gives one id are told apart by instance_ids.)"""
    iid = f"{job}{ITEM_SEP}{_SAFE.sub('_', item)}"
    if len(iid) <= JOB_ID_MAX:
        return iid
    return _digested(iid, item)


def _digested(iid: str, item: str) -> str:
    """Id `iid` cut to leave room for a digest of `item`, and the digest: an id of that item alone."""
    digest = hashlib.sha256(item.encode()).hexdigest()[:12]
    return f"{iid[: JOB_ID_MAX - len(digest) - 1]}_{digest}"


def instance_ids(job: str, items: Sequence[str], taken: Callable[[str], str | None]) -> list[str]:
    """The ids of loop `job`'s instances of `items` (distinct): instance_id's, but an item whose id is another
    item's gets a digest of itself after it, as a long item does (`q r` and `q_r` both read `q_r`).

    The item that came first keeps the plain id: one the run holds already (`taken` gives the item of an
    instance id it holds, else None), else the one earlier in the list. So the same history (the run's
    expansions, in order) gives the same ids, and a resume makes them again; an item added at the end of a
    list leaves the ids of the others as they were.

    Raises:
        ConditionError: two items would still have one id (their digests clash).
    """
    claimed: dict[str, str] = {}
    ids: list[str] = []
    for item in items:
        iid = instance_id(job, item)
        if claimed.get(iid, item) != item or (taken(iid) or item) != item:
            iid = _digested(f"{job}{ITEM_SEP}{_SAFE.sub('_', item)}", item)
            other = claimed.get(iid) or taken(iid) or item
            if other != item:
                raise ConditionError(f"items '{other}' and '{item}' give one instance id {iid}")
        claimed[iid] = item
        ids.append(iid)
    return ids


PLACEHOLDER = "{item}"
"""What a looped job's command names its item by."""
_ITEM_VAR = "WLOADCTL_ITEM"
_PLAIN = re.compile(r"[A-Za-z0-9_.:/@%+,=-]+\Z")
"""Items that read as themselves anywhere in shell text (quoted or not, in a comment, a here-document or
arithmetic): written as they are."""
_WORD_END = " \t\n;&|()<>"
"""Characters after which a `#` starts a comment."""
_HEREDOC = re.compile(r"<<(-?)[ \t]*((?:[A-Za-z0-9_.-]|\\[^\n]|'[^'\n]*'|\"[^\"\n]*\")+)")
"""A here-document's operator and delimiter word (quoted, in part or whole, or not)."""
_UNQUOTE = re.compile(r"\\(.)|'([^']*)'|\"([^\"]*)\"")


class UnfitItem(ValueError):
    """An item that cannot be given to a command safely; the message says why (the instance never runs)."""


def shell_item(command: str, item: str) -> str:
    """A `/bin/sh -c` command text with each `{item}` replaced so that the shell reads the item as text, never
    as shell syntax: an item comes from a plan's variables or an upstream job's output (a file name such as
    `x; rm -rf ~` runs nothing).

    An item of plain characters (letters, digits, `_ . : / @ % + , = -`) reads as itself everywhere and is
    written as it is. Any other item's text never enters the command: `{item}` becomes an expansion of
    $WLOADCTL_ITEM, which every instance has in its environment, written for where `{item}` stands (quoted
    outside quotes, bare in double quotes and in a here-document, closing and reopening single quotes). Were
    this reading of the shell text wrong somewhere, the item would come out as other text, never as a command.

    A quoted here-document (`<<'EOF'`, `<<"EOF"`, `<<\\EOF`) expands nothing: its body gets the item's text as
    it is, unless that would end the document early (an item with a line break, or one that makes a line the
    delimiter), and the rest of it would run as commands.

    Raises:
        UnfitItem: the item would end a quoted here-document early.
    """
    if PLACEHOLDER not in command:
        return command
    plain = _PLAIN.match(item) is not None
    if plain and "<<" not in command:
        return command.replace(PLACEHOLDER, item)
    out: list[str] = []
    stack = ["U"]  # U unquoted, S single, D double quotes; P $( ), B backquotes, V ${ }, A arithmetic
    heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, strip tabs, quoted) of those opened on this line
    i, n = 0, len(command)
    while i < n:
        if command.startswith(PLACEHOLDER, i):
            out.append(item if plain else _expansion(stack[-1]))
            i += len(PLACEHOLDER)
            continue
        c = command[i]
        top = stack[-1]
        if top in "UPB" and c == "#" and (i == 0 or command[i - 1] in _WORD_END):
            end = command.find("\n", i)
            end = n if end < 0 else end
            # a comment: text of no effect
            out.append(command[i:end].replace(PLACEHOLDER, item if plain else f"${{{_ITEM_VAR}}}"))
            i = end
            continue
        if top in "UPB" and command.startswith("<<", i) and not command.startswith("<<<", i):
            m = _HEREDOC.match(command, i)
            if m is not None:
                word = m.group(2)
                delimiter = _UNQUOTE.sub(lambda q: next(g for g in q.groups() if g is not None), word)
                heredocs.append((delimiter, m.group(1) == "-", delimiter != word))
                out.append(m.group(0))
                i = m.end()
                continue
        out.append(c)
        i += 1
        if c == "\n" and heredocs and top in "UPB":
            i = _heredoc_bodies(command, i, heredocs, out, item)
            heredocs = []
            continue
        if top == "S":
            if c == "'":
                stack.pop()
            continue
        if c == "\\" and i < n:
            out.append(command[i])
            i += 1
        elif c == '"':
            if top == "D":
                stack.pop()
            else:
                stack.append("D")
        elif c == "'" and top != "D":
            stack.append("S")
        elif c == "`":
            if top == "B":
                stack.pop()
            else:
                stack.append("B")
        elif c == "$" and command.startswith("((", i):
            # Arithmetic, $(( )) or (( )): a shell may evaluate an expanded value there as an expression
            out.append("((")
            stack += ["A", "A"]
            i += 2
        elif c == "(" and top in "UPB" and command.startswith("(", i):
            out.append("(")
            stack += ["A", "A"]
            i += 1
        elif c == "$" and i < n and command[i] in "({":
            out.append(command[i])
            stack.append("P" if command[i] == "(" else "V")
            i += 1
        elif c == "(" and top in "PA":
            stack.append(top)
        elif (c == ")" and top in "PA") or (c == "}" and top == "V"):
            stack.pop()
    return "".join(out)


def _expansion(context: str) -> str:
    """$WLOADCTL_ITEM's expansion as one word of text where the lexer stands (shell_item)."""
    if context == "S":
        return f"'\"${_ITEM_VAR}\"'"  # close the single quotes, the quoted expansion, reopen them
    if context == "D":
        return f"${{{_ITEM_VAR}}}"
    if context == "A":
        # (bash evaluates an expanded value in arithmetic, `a[$(...)]` included: the item is not given there)
        return "'(an item of other than plain characters is no number)'"
    return f'"${_ITEM_VAR}"'


def _heredoc_bodies(command: str, i: int, heredocs: list[tuple[str, bool, bool]], out: list[str],
                    item: str) -> int:
    """Copy the bodies of the here-documents opened on the line that ended before `i`, each up to its delimiter
    line, with `{item}` replaced: in a quoted document (which expands nothing) by the item's text; in another,
    by a plain item's text, else by the bare expansion (the shell expands it in a body, and reads nothing of the
    item). Returns where the command goes on.

    Raises:
        UnfitItem: the item's text would end a quoted document before its delimiter line.
    """
    n = len(command)
    plain = _PLAIN.match(item) is not None
    for delimiter, strip, quoted in heredocs:
        while i < n:
            end = command.find("\n", i)
            end = n if end < 0 else end + 1
            line = command[i:end]
            i = end
            if (line.lstrip("\t") if strip else line).rstrip("\n") == delimiter:
                out.append(line)
                break
            if PLACEHOLDER not in line:
                out.append(line)
                continue
            opening = f"<<{'-' if strip else ''}'{delimiter}'"
            if quoted and "\n" in item:
                raise UnfitItem(f"its item holds a line break, which could end the quoted here-document {opening} "
                                "early and run the rest as commands")
            text = line.replace(PLACEHOLDER, item) if plain or quoted else None
            if text is not None and (text.lstrip("\t") if strip else text).rstrip("\n") == delimiter:
                if quoted:
                    raise UnfitItem(f"its item would make a line of the quoted here-document {opening} its end, "
                                    "and the rest would run as commands")
                text = None
            out.append(line.replace(PLACEHOLDER, f"${{{_ITEM_VAR}}}") if text is None else text)
    return i


def make_instance(spec: JobSpec, item: str, depends_on: tuple[str, ...] | None = None,
                  iid: str | None = None) -> JobSpec:
    """One instance of a `for_each` job: `{item}` replaced in its command (as text the shell does not read as
    syntax, in a command the shell runs: shell_item; as it is in any other argument), its cwd and its env
    values; WLOADCTL_ITEM in its environment; its id `iid` (from instance_ids), else instance_id's.

    An item that cannot be given safely (unfit_reason) leaves `{item}` where it stands and makes the instance
    `unfit`: it fails to start, saying why, and never runs.
    """
    unfit: str | None = None
    cmd = spec.command
    try:
        cmd = _command_with(cmd, item)
    except UnfitItem as e:
        unfit = str(e)
    cwd, env = spec.cwd, spec.env
    if cwd is not None and PLACEHOLDER in cwd:
        if any(part == ".." for part in item.split("/")):
            unfit = unfit or (f"its item holds '..': in cwd {cwd} it would name a folder outside the one "
                              "the plan names")
        else:
            cwd = cwd.replace(PLACEHOLDER, item)
    if any(PLACEHOLDER in v for _n, v in env):
        # (not shell text: a value is the item's text as it is)
        env = tuple((n, v.replace(PLACEHOLDER, item)) for n, v in env)
    deps, kinds = (spec.depends_on, spec.dep_kinds) if depends_on is None else (depends_on, None)
    return dataclasses.replace(spec, id=iid or instance_id(spec.id, item), command=cmd, for_each=None, item=item,
                               env=(*env, ("WLOADCTL_ITEM", item)), cwd=cwd, depends_on=deps, dep_kinds=kinds,
                               unfit=unfit)


def _command_with(cmd: str | tuple[str, ...] | None, item: str) -> str | tuple[str, ...] | None:
    """Command `cmd` with `{item}` replaced (make_instance).

    Raises:
        UnfitItem: the item cannot be given to it safely.
    """
    if cmd is None:
        return None
    if isinstance(cmd, str):
        return shell_item(cmd, item)
    if not any(PLACEHOLDER in c for c in cmd):
        return cmd
    # An argument is the item as it is, but a shell's script (its -c) is shell text; another language's program
    # (python -c, perl -e, awk's) would read it as code: plans holding one are refused (planchecks).
    scripts, code = code_arguments(cmd)
    held = next((k for k in sorted(code) if PLACEHOLDER in cmd[k]), None)
    if held is not None:
        raise UnfitItem(f"argument {held + 1} of its command is {code[held]}, where the item would be code")
    return tuple(shell_item(c, item) if k in scripts else c.replace(PLACEHOLDER, item) for k, c in enumerate(cmd))


def output_items(spec: JobSpec, outcomes: Mapping[str, Mapping[str, Any]],
                 variables: Mapping[str, object]) -> tuple[str, ...]:
    """The items of a `for_each` over upstream output, from the upstreams' outcomes.

    Args:
        spec: the looped job (its for_each is a DynamicItems).
        outcomes: exit_code, state and result of each job the expression reads, by id.
        variables: the plan's variables.

    Raises:
        ConditionError: the expression cannot be evaluated, or does not give a list of distinct
            texts or numbers, or gives more than max_items.
    """
    loop = spec.for_each
    assert isinstance(loop, DynamicItems)
    value = parse_condition(loop.expr).value(outcomes, variables)
    if not isinstance(value, list):
        what = "nothing" if value is None else f"a {type(value).__name__}" if not hasattr(value, "get") \
            else "a mapping"
        raise ConditionError(f"{loop.expr} gave {what}, not a list")
    items: list[str] = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ConditionError(f"{loop.expr} holds {type(v).__name__} items; items must be text or numbers")
        items.append(str(v))
    if len(items) > loop.max_items:
        raise ConditionError(f"{loop.expr} gave {len(items)} items, more than max_items {loop.max_items}")
    seen: set[str] = set()
    for item in items:
        if item in seen:
            raise ConditionError(f"{loop.expr} gives item '{item}' twice (instance {instance_id(spec.id, item)})")
        seen.add(item)
    return tuple(items)


def with_instances(parent: JobSpec, instances: Iterable[JobSpec]) -> JobSpec:
    """The looped job once expanded: it also waits for every instance (it ends when they all have)."""
    ids = tuple(j.id for j in instances)
    kinds = None if parent.dep_kinds is None else (*parent.dep_kinds, *([DepKind.SUCCESS] * len(ids)))
    return dataclasses.replace(parent, depends_on=(*parent.depends_on, *ids), dep_kinds=kinds)


def without_instances(parent: JobSpec, ids: Collection[str]) -> JobSpec:
    """The looped job waiting no longer for the instances `ids` (its own upstreams it still waits for)."""
    keep = [k for k, d in enumerate(parent.depends_on) if d not in ids]
    kinds = None if parent.dep_kinds is None else tuple(parent.dep_kinds[k] for k in keep)
    return dataclasses.replace(parent, depends_on=tuple(parent.depends_on[k] for k in keep), dep_kinds=kinds)


def apply_expansions(plan: Plan, expansions: Iterable[tuple[str, tuple[str, ...]]]) -> Plan:
    """The plan with the instances of each `for_each` over output that a run has expanded, in order.

    Instances come after every job, in the order they were made, as they did in the run. A loop
    that made its instances again (its list read anew after an upstream's rerun) waits for those
    of its last expansion alone; an expansion of no items stands for the list to be read again.
    Instances of an earlier list stay jobs of the run, and one listed again keeps its place.
    """
    jobs = dict(plan.jobs)
    for parent_id, items in expansions:
        parent = plan.jobs[parent_id]
        parent = without_instances(parent, [d for d in parent.depends_on if d.startswith(parent_id + ITEM_SEP)])
        ids = instance_ids(parent_id, items, lambda iid: jobs[iid].item if iid in jobs else None)
        made = [make_instance(parent, item, depends_on=(), iid=iid) for item, iid in zip(items, ids, strict=True)]
        for inst in made:
            jobs[inst.id] = inst
        jobs[parent_id] = with_instances(parent, made)
    return dataclasses.replace(plan, jobs=jobs)


def expand_for_each(plan: Plan) -> Plan:
    """Give every `for_each` job over a list (or `vars.NAME`) its instances; the looped job stays, as the loop,
    waiting for all of them (as a loop over output does once expanded, core/fanout.py): it runs nothing, and
    ends SUCCEEDED when they have all succeeded, FAILED when one failed, so its dependents' `success`, `failure`
    and `done` hold for the whole loop.

    `{item}` in a command (string or argv elements), a cwd or an env value becomes the item (make_instance);
    each instance also gets WLOADCTL_ITEM in its environment.

    Raises:
        PlanError: every problem found (bad variable, empty list, instance id clashing with a job).
    """
    looped = {jid: j for jid, j in plan.jobs.items()
              if j.for_each is not None and not isinstance(j.for_each, DynamicItems)}
    if not looped:
        return plan
    problems: list[WloadError] = []
    jobs: dict[str, JobSpec] = {}
    for jid, j in plan.jobs.items():
        if jid not in looped:
            jobs[jid] = j
            continue
        try:
            items = items_of(j, plan.variables)
        except WloadError as e:
            e.file = plan.path
            problems.append(e)
            continue
        made = []
        try:
            ids = instance_ids(jid, items, lambda _: None)
        except ConditionError as e:
            problems.append(WloadError(f"for_each: {e}", file=plan.path, line=j.line, job=jid))
            continue
        for item, iid in zip(items, ids, strict=True):
            inst = make_instance(j, item, iid=iid)
            if inst.unfit is not None:
                shown = item if len(item) <= 40 else item[:37] + "..."
                problems.append(WloadError(f"for_each item '{shown}' cannot start: {inst.unfit}",
                                           file=plan.path, line=j.line, job=jid,
                                           hint="change the item, or let the command read $WLOADCTL_ITEM"))
                continue
            if inst.id in plan.jobs or inst.id in jobs:
                problems.append(WloadError(f"instance '{inst.id}' of for_each clashes with another job",
                                           file=plan.path, line=j.line, job=jid))
                continue
            jobs[inst.id] = inst
            made.append(inst)
        # (each instance waits for its own confirmation, if the job asks for one: the loop itself runs nothing)
        jobs[jid] = dataclasses.replace(with_instances(j, made), confirm=False)
    if problems:
        raise PlanError(f"{plan.path}: {len(problems)} problem(s) in for_each loops", problems=problems,
                        file=plan.path)
    return dataclasses.replace(plan, jobs=jobs)

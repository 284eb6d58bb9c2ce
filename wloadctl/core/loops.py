"""`for_each` loops: one job instance per item, with dependents waiting for every instance."""

from __future__ import annotations

import dataclasses
import re

from wloadctl.core.plan import JobSpec, Plan
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
        return tuple(str(v) for v in value)
    if not fe:
        raise WloadError("for_each: the list of items is empty", job=spec.id, line=spec.line)
    return tuple(fe)


def instance_id(job: str, item: str) -> str:
    """The id of one instance: `<job>@<item>` with characters ids may not hold replaced by `_`."""
    return f"{job}{ITEM_SEP}{_SAFE.sub('_', item)}"


def expand_for_each(plan: Plan) -> Plan:
    """Replace every `for_each` job by its instances and point its dependents at all of them.

    `{item}` in a command (string or argv elements) becomes the item; each instance also gets
    WLOADCTL_ITEM in its environment.

    Raises:
        PlanError: every problem found (bad variable, empty list, instance id clashing with a job).
    """
    looped = {jid: j for jid, j in plan.jobs.items() if j.for_each is not None}
    if not looped:
        return plan
    problems: list[WloadError] = []
    instances: dict[str, list[str]] = {}
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
        ids = []
        for item in items:
            iid = instance_id(jid, item)
            if iid in plan.jobs or iid in jobs:
                problems.append(WloadError(f"instance '{iid}' of for_each clashes with another job", file=plan.path,
                                           line=j.line, job=jid))
                continue
            cmd = j.command
            if isinstance(cmd, str):
                cmd = cmd.replace("{item}", item)
            elif cmd is not None:
                cmd = tuple(c.replace("{item}", item) for c in cmd)
            jobs[iid] = dataclasses.replace(j, id=iid, command=cmd, for_each=None, item=item,
                                            env=(*j.env, ("WLOADCTL_ITEM", item)))
            ids.append(iid)
        instances[jid] = ids
    if problems:
        raise PlanError(f"{plan.path}: {len(problems)} problem(s) in for_each loops", problems=problems,
                        file=plan.path)
    # Dependents of a looped job wait for every instance, with the same dependency kind.
    for jid, j in list(jobs.items()):
        if not any(d in instances for d in j.depends_on):
            continue
        deps: list[str] = []
        kinds = []
        for k, d in enumerate(j.depends_on):
            for target in instances.get(d, [d]):
                deps.append(target)
                kinds.append(j.kind_of(k))
        jobs[jid] = dataclasses.replace(j, depends_on=tuple(deps),
                                        dep_kinds=None if j.dep_kinds is None else tuple(kinds))
    return dataclasses.replace(plan, jobs=jobs)

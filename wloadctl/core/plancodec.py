"""A compact JSON form of a loaded plan, so a resumed run or a console does not parse its YAML again."""

from __future__ import annotations

import dataclasses
import gc
import json
import operator
from typing import Any

from wloadctl.core.plan import DynamicItems, JobSpec, Plan, RetryPolicy, Schedule
from wloadctl.core.states import DepKind, SlaTier

CODEC_VERSION = 1
_FIELDS = [f.name for f in dataclasses.fields(JobSpec)]
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(JobSpec) if f.default is not dataclasses.MISSING}
_MISSING = object()


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _pairs(v: list[list[Any]]) -> tuple[tuple[Any, Any], ...]:
    return tuple((a, b) for a, b in v)


def encode_plan(plan: Plan) -> str:
    """The plan as JSON: retry policies deduplicated, each job a row of the fields that differ from defaults."""
    policies: dict[RetryPolicy, int] = {}
    rows = []
    get_all = operator.attrgetter(*_FIELDS)
    pairs = [(name, _DEFAULTS.get(name, _MISSING)) for name in _FIELDS]
    for j in plan.jobs.values():
        # Only the fields that differ from the defaults are written (attrgetter reads all in one call).
        row: dict[str, Any] = {name: v for (name, d), v in zip(pairs, get_all(j), strict=True) if v != d}
        if "retry" in row:
            row["retry"] = policies.setdefault(row["retry"], len(policies))
        if "sla" in row:
            row["sla"] = int(row["sla"])
        if row.get("dep_kinds") is not None:
            row["dep_kinds"] = [int(k) for k in row["dep_kinds"]]
        if isinstance(row.get("for_each"), DynamicItems):
            row["for_each"] = {"expr": row["for_each"].expr, "max_items": row["for_each"].max_items}
        rows.append(row)
    doc = {
        "v": CODEC_VERSION,
        "plan": {"name": plan.name, "resources": plan.resources, "variables": plan.variables,
                 "on_failure": plan.on_failure, "timezone": plan.timezone, "path": plan.path,
                 "groups": plan.groups, "digest": plan.digest, "share": plan.share,
                 "schedule": dataclasses.asdict(plan.schedule) if plan.schedule else None,
                 "limits": plan.limits, "roles": plan.roles,
                 "four_eyes": list(plan.four_eyes)},
        "retries": [dataclasses.asdict(p) for p in policies],
        "jobs": rows,
    }
    return json.dumps(doc, separators=(",", ":"))


def decode_plan(text: str) -> Plan | None:
    """The plan back from encode_plan's JSON; None when the form is unknown (then parse the YAML)."""
    # Hundreds of thousands of small objects: the cyclic collector would walk them again and again.
    was = gc.isenabled()
    gc.disable()
    try:
        return _decode(text)
    finally:
        if was:
            gc.enable()


def _decode(text: str) -> Plan | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("v") != CODEC_VERSION:
        return None
    policies = [RetryPolicy(**{k: _tuples(v) for k, v in p.items()}) for p in doc["retries"]]
    jobs: dict[str, JobSpec] = {}
    pairs = _pairs
    for kw in doc["jobs"]:
        if "depends_on" in kw:
            kw["depends_on"] = tuple(kw["depends_on"])
        cmd = kw.get("command")
        if isinstance(cmd, list):
            kw["command"] = tuple(cmd)
        for name in ("resources", "env"):
            if name in kw:
                kw[name] = pairs(kw[name])
        if "four_eyes" in kw:
            kw["four_eyes"] = tuple(kw["four_eyes"])
        if isinstance(kw.get("for_each"), list):
            kw["for_each"] = tuple(kw["for_each"])
        elif isinstance(kw.get("for_each"), dict):
            kw["for_each"] = DynamicItems(**kw["for_each"])
        if "retry" in kw:
            kw["retry"] = policies[kw["retry"]]
        if "sla" in kw:
            kw["sla"] = SlaTier(kw["sla"])
        if "dep_kinds" in kw and kw["dep_kinds"] is not None:
            kw["dep_kinds"] = tuple(DepKind(k) for k in kw["dep_kinds"])
        kw.setdefault("command", None)
        spec = JobSpec(**kw)
        jobs[spec.id] = spec
    p = doc["plan"]
    sched = Schedule(**{k: _tuples(v) for k, v in p["schedule"].items()}) if p.get("schedule") else None
    return Plan(p["name"], jobs, p["resources"], p["variables"], p["on_failure"], p["timezone"], p["path"],
                p.get("groups") or {}, sched, p["digest"], float(p.get("share", 1.0)),
                limits=p.get("limits") or "claim", roles=p.get("roles"),
                four_eyes=tuple(p.get("four_eyes") or ()))

"""What a job is, as its run's plan says: `wloadctl show JOB` and the console's job detail.

`why` and `history` say what became of a job; an operator at a failed job also asks what it is: what it
runs, where, with which settings, and where the plan writes it. This is read from the plan as the run has it
(the journal's copy, with the instances its loops made), not from the plan file as it may be now.
"""

from __future__ import annotations

import shlex
from typing import Any

from wloadctl.core.durations import format_duration
from wloadctl.core.outputcap import format_size
from wloadctl.core.plan import NO_RETRY, DynamicItems, JobSpec, Plan

CONSOLE_JOBS = 200_000
"""The most jobs of a run whose plan the console loads to show a job's definition (a bigger plan costs it
seconds and hundreds of MB: `wloadctl show JOB` reads it then)."""


def definition(plan: Plan, job: str) -> dict[str, Any] | None:
    """Job `job` of `plan` as a plain dict (None: no such job in it).

    Only what differs from a plain job is given, besides its id, command, plan file and line.
    """
    spec = plan.jobs.get(job)
    if spec is None:
        return None
    out: dict[str, Any] = {"job": spec.id, "plan": plan.path, "line": spec.line or None,
                           "type": spec.type, "command": _command(spec.command),
                           "shell": isinstance(spec.command, str)}
    if spec.description:
        out["description"] = spec.description
    if spec.depends_on:
        out["depends_on"] = list(spec.depends_on)
        if spec.dep_kinds is not None:
            out["dep_kinds"] = [k.name.lower() for k in spec.dep_kinds]
    out["sla"] = spec.sla.label
    plain = JobSpec("", None)
    for name in ("priority", "timeout", "max_output", "expected", "cwd", "deadline", "not_before", "condition", "until",
                 "group", "pool", "agent", "cpu", "memory", "run_as", "confirm", "preemptible", "item"):
        value = getattr(spec, name)
        if value != getattr(plain, name):
            out[name] = value
    if spec.until is not None:
        out["max_iterations"] = spec.max_iterations
    if not spec.idempotent:
        out["idempotent"] = False
    if spec.four_eyes:
        out["four_eyes"] = list(spec.four_eyes)
    if spec.resources:
        out["resources"] = dict(spec.resources)
    if spec.env:
        out["env"] = dict(spec.env)
    if isinstance(spec.for_each, DynamicItems):
        out["for_each"] = spec.for_each.expr
    elif spec.for_each is not None:
        out["for_each"] = spec.for_each if isinstance(spec.for_each, str) else list(spec.for_each)
    r = spec.retry
    if r != NO_RETRY:
        out["retries"] = {"count": r.count, "delay": r.delay, "backoff": r.backoff, "max_delay": r.max_delay,
                          "jitter": r.jitter, "exit_codes": [list(x) for x in r.exit_codes] if r.exit_codes else None,
                          "on_timeout": r.on_timeout, "on_signal": r.on_signal, "on_lost": r.on_lost,
                          "on_max_output": r.on_max_output}
    return out


def _command(command: str | tuple[str, ...] | None) -> str | list[str] | None:
    return list(command) if isinstance(command, tuple) else command


def definition_lines(d: dict[str, Any]) -> list[str]:
    """`definition`'s dict as an operator reads it: a line a setting, the command whole."""
    lines = [f"{d['job']}  (defined at {_where(d)})", *brief_lines(d, with_place=False)]
    if d.get("depends_on"):
        kinds = d.get("dep_kinds")
        ups = [u if not kinds or kinds[k] == "success" else f"{u} ({kinds[k]})" for k, u in enumerate(d["depends_on"])]
        lines.append(f"  depends on:  {', '.join(ups)}")
    facts = [f"tier {d['sla']}"]
    if d.get("priority"):
        facts.append(f"priority {d['priority']}")
    if d.get("timeout"):
        facts.append(f"timeout {format_duration(d['timeout'])}")
    if "max_output" in d:
        # (only a cap other than the built-in default is in the dict: None is none at all)
        cap = d["max_output"]
        facts.append("max_output none" if cap is None else f"max_output {format_size(cap)}")
    if d.get("expected"):
        facts.append(f"expected {format_duration(d['expected'])}")
    r = d.get("retries")
    if r:
        facts.append(f"retries {r['count']} (delay {format_duration(r['delay'])} x{r['backoff']:g}, "
                     f"at most {format_duration(r['max_delay'])})")
    if d.get("idempotent") is False:
        facts.append("not idempotent")
    lines.append("  " + ", ".join(facts))
    place = [f"{k} {d[k]}" for k in ("pool", "agent", "group", "run_as", "cwd") if d.get(k)]
    if place:
        lines.append("  runs:        " + ", ".join(place))
    when = [f"{k} {d[k]}" for k in ("not_before", "deadline") if d.get(k)]
    if when:
        lines.append("  times:       " + ", ".join(when))
    for key, label in (("condition", "if"), ("until", "until"), ("for_each", "for_each"), ("item", "item")):
        if d.get(key) is not None:
            value = d[key] if not isinstance(d[key], list) else ", ".join(map(str, d[key]))
            extra = f" (at most {d['max_iterations']} iterations)" if key == "until" else ""
            lines.append(f"  {label + ':':<12} {value}{extra}")
    if d.get("resources"):
        lines.append("  resources:   " + ", ".join(f"{k} {v}" for k, v in d["resources"].items()))
    claims = [f"{k} {d[k]}" for k in ("cpu", "memory") if d.get(k)]
    if claims:
        lines.append("  claims:      " + ", ".join(claims))
    if d.get("env"):
        lines.append("  env:         " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in d["env"].items()))
    gates = [g for g, on in (("confirm before it starts", d.get("confirm")),
                             ("preemptible", d.get("preemptible"))) if on]
    if d.get("four_eyes"):
        gates.append(f"four eyes for {', '.join(d['four_eyes'])}")
    if gates:
        lines.append("  operators:   " + ", ".join(gates))
    return lines


def brief_lines(d: dict[str, Any], with_place: bool = True) -> list[str]:
    """What the job is in a few lines: its description, its command whole, and where the plan writes it."""
    lines = []
    if d.get("description"):
        lines.append(f"  description: {d['description']}")
    cmd = d.get("command")
    if cmd is None:
        lines.append(f"  command:     none ({d.get('type', 'noop')} job)")
    elif isinstance(cmd, list):
        lines.append(f"  command:     {shlex.join(cmd)}  (argv, no shell)")
    else:
        first, *rest = cmd.rstrip("\n").split("\n")
        lines.append(f"  command:     {first}" + ("  (/bin/sh -c)" if not rest else ""))
        lines.extend(f"               {more}" for more in rest)
    if with_place:
        lines.append(f"  defined at:  {_where(d)}")
    return lines


def _where(d: dict[str, Any]) -> str:
    return f"{d['plan']}:{d['line']}" if d.get("line") else d.get("plan") or "its plan"

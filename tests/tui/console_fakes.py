"""A canned twin of RunClient for console tests: a small bank plan frozen mid-run."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wloadctl.core.dag import Dag
from wloadctl.core.plan import Plan
from wloadctl.core.planfile import load_plan_text
from wloadctl.core.states import JobState
from wloadctl.core.verbs import VERB_FROM

T0 = 1_700_000_000.0
"""When the canned run started (2023-11-14 22:13:20 UTC)."""
NOW = T0 + 754.0
"""The frozen clock of the tests."""

PLAN_TEXT = """\
name: eod_mini
jobs:
  extract_core:   {command: "sleep 1", sla: critical}
  extract_cards:  {command: "sleep 1", sla: high}
  extract_fx:     {command: "sleep 1", sla: standard}
  load_gl:
    {command: "sleep 1", depends_on: [extract_core, extract_cards], sla: critical,
     deadline: "+30m"}
  load_fx_rates:  {command: "exit 3", depends_on: [extract_fx], sla: high}
  post_interest:  {command: "sleep 1", depends_on: [load_gl], sla: critical}
  revalue_fx:
    {command: "sleep 1", depends_on: [load_fx_rates, load_gl], sla: high,
     deadline: "+20m"}
  limits_check:   {command: "sleep 1", depends_on: [load_gl], sla: standard}
  gl_close:
    {command: "sleep 1", depends_on: [post_interest, revalue_fx], sla: critical,
     deadline: "+2h"}
  reg_report:
    {command: "sleep 1", depends_on: [gl_close], sla: critical, deadline: "+3h"}
  mgmt_pack:      {command: "sleep 1", depends_on: [gl_close, limits_check], sla: low}
  archive_logs:   {command: "sleep 1", sla: low}
  stmt_print:     {command: "sleep 1", depends_on: [post_interest], sla: standard}
  cleanup_tmp:    {command: "sleep 1", depends_on: [archive_logs], sla: low}
"""

S = JobState
# (state, attempt, executor, exit_code, started offset, ended offset, reason)
ROWS: dict[
    str, tuple[JobState, int, int, int | None, float | None, float | None, str]
] = {
    "extract_core": (S.SUCCEEDED, 1, 0, 0, 2.0, 182.0, ""),
    "extract_cards": (S.SUCCEEDED, 1, 1, 0, 2.5, 95.0, ""),
    "extract_fx": (S.SUCCEEDED, 1, 0, 0, 3.0, 40.0, ""),
    "load_gl": (S.RUNNING, 1, 1, None, 190.0, None, ""),
    "load_fx_rates": (S.FAILED, 2, 0, 3, 500.0, 512.0, "exit status 3"),
    "post_interest": (S.WAITING, 0, -1, None, None, None, ""),
    "revalue_fx": (
        S.UPSTREAM_FAILED,
        0,
        -1,
        None,
        None,
        None,
        "upstream load_fx_rates FAILED",
    ),
    "limits_check": (S.HELD, 0, -1, None, None, None, "held by ops: limits feed late"),
    "gl_close": (S.WAITING, 0, -1, None, None, None, ""),
    "reg_report": (S.WAITING, 0, -1, None, None, None, ""),
    "mgmt_pack": (S.WAITING, 0, -1, None, None, None, ""),
    "archive_logs": (S.RUNNING, 1, 0, None, 600.0, None, ""),
    "stmt_print": (S.WAITING, 0, -1, None, None, None, ""),
    "cleanup_tmp": (S.WAITING, 0, -1, None, None, None, ""),
}


@dataclass
class Header:
    """The fields of a board header the console reads."""

    beat: float
    scheduler_pid: int = 4242
    epoch: int = 2
    done: bool = False
    lease_until: float = 0.0


@dataclass
class Run:
    """The fields of a RunRow the console reads."""

    run_id: str = "20231114-221320-abc123"
    plan_name: str = "eod_mini"
    business_date: str = "2023-11-14"
    started: float = T0
    status: str = "running"


@dataclass
class FakeClient:
    """Answers like RunClient from canned data; records the verbs it is asked for."""

    live: bool = True
    state_dir: Path = Path("/nonexistent/eod_mini")
    run: Run = field(default_factory=Run)
    sent: list[tuple[str, list[str], str, bool]] = field(default_factory=list)
    transitions: list[tuple] = field(default_factory=list)
    agent_rows: list[dict[str, Any]] = field(default_factory=list)
    lost_broker: dict[str, Any] | None = None
    paused: str = ""
    executor_rows: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {
                "executor": 0,
                "pid": 4250,
                "health": "alive",
                "beat_age": 0.2,
                "running": 1,
                "slots": 4,
                "load1": 0.52,
                "rss_kb": 21_600,
                "jobs_done": 12,
            },
            {
                "executor": 1,
                "pid": 4251,
                "health": "suspect",
                "beat_age": 2.4,
                "running": 1,
                "slots": 4,
                "load1": 0.52,
                "rss_kb": 20_100,
                "jobs_done": 9,
            },
        ]
    )
    closed: bool = False
    role: str = "admin"
    four_eyes: list[str] = field(default_factory=list)
    drill: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self._plan = load_plan_text(PLAN_TEXT, "eod_mini.yaml")
        self.ids_list = list(self._plan.jobs)
        seq = 0
        for i, job in enumerate(self.ids_list):
            st, att, ex, code, s, e, reason = ROWS[job]
            seq += 1
            self.transitions.append(
                (seq, i, 0, int(st), att, T0 + (e or s or 1.0), ex, code, reason)
            )

    def board_header(self) -> Header | None:
        return Header(NOW - 0.1) if self.live else None

    def ids(self) -> list[str]:
        return self.ids_list

    def plan(self) -> Plan:
        return self._plan

    def plan_dag(self) -> Dag:
        return Dag(self._plan)

    def definition(self, job: str) -> dict[str, Any]:
        from wloadctl.jobdef import definition

        d = definition(self._plan, job)
        assert d is not None, job
        return d

    def expected_history(self) -> dict[str, float]:
        return {}

    def job_rows(self) -> list[tuple]:
        out = []
        for i, job in enumerate(self.ids_list):
            st, att, ex, code, s, e, reason = ROWS[job]
            out.append(
                (
                    i,
                    job,
                    int(st),
                    att,
                    ex,
                    code,
                    T0 + s if s is not None else None,
                    T0 + e if e is not None else None,
                    reason,
                )
            )
        return out

    def changes_since(self, seq: int, limit: int = 100_000) -> list[tuple]:
        return [t for t in self.transitions if t[0] > seq][:limit]

    def last_seq(self) -> int:
        return max((t[0] for t in self.transitions), default=0)

    def executors(self) -> list[dict[str, Any]]:
        return list(self.executor_rows) if self.live else []

    def agents(self) -> list[dict[str, Any]]:
        return list(self.agent_rows) if self.live else []

    def broker_lost(self) -> dict[str, Any] | None:
        return self.lost_broker if self.live else None

    def pause_reason(self, header: Any) -> str | None:
        return self.paused or None

    def control(
        self, verb: str, jobs: list[str], reason: str = "", downstream: bool = False
    ) -> dict[str, Any]:
        self.sent.append((verb, list(jobs), reason, downstream))
        results = []
        # Globs are matched as the scheduler matches them (wloadctl.core.verbs.resolve_jobs).
        for job in (j for name in jobs for j in (fnmatch.filter(self.ids_list, name) if set(name) & set("*?[")
                                                  else [name])):
            st = ROWS[job][0]
            ok = st in VERB_FROM[verb]
            results.append(
                [
                    job,
                    ok,
                    f"job '{job}' {verb} applied"
                    if ok
                    else f"job '{job}' is {st.name}",
                ]
            )
        return {"ok": all(r[1] for r in results), "results": results, "live": self.live}

    def last_drill(self) -> dict[str, Any] | None:
        return self.drill

    def reread_run(self) -> Run:
        return self.run

    def whoami(self) -> dict[str, Any]:
        from wloadctl.access import Role, allowed_verbs

        return {"ok": True, "user": "ana", "role": self.role, "verbs": allowed_verbs(Role[self.role.upper()]),
                "four_eyes": list(self.four_eyes)}

    def why(self, job: str) -> dict[str, Any]:
        st = ROWS[job][0]
        return {
            "job": job,
            "state": st.name,
            "tier": "critical",
            "attempt": ROWS[job][1],
            "reasons": [f"canned reason for {job}"],
            "verbs": ["hold"],
        }

    def history(self, job: str) -> dict[str, Any]:
        st, att, ex, code, s, e, reason = ROWS[job]
        tx = [
            {
                "from": "WAITING",
                "to": "READY",
                "attempt": 0,
                "ts": T0 + 1,
                "executor": -1,
                "exit_code": None,
                "reason": "",
                "cause": "start",
            }
        ]
        if att:
            tx.append(
                {
                    "from": "QUEUED",
                    "to": "RUNNING",
                    "attempt": att,
                    "ts": T0 + (s or 0),
                    "executor": ex,
                    "exit_code": None,
                    "reason": "",
                    "cause": "turn-3",
                }
            )
        if e is not None:
            tx.append(
                {
                    "from": "RUNNING",
                    "to": st.name,
                    "attempt": att,
                    "ts": T0 + e,
                    "executor": ex,
                    "exit_code": code,
                    "reason": reason,
                    "cause": "turn-9",
                }
            )
        return {
            "job": job,
            "state": st.name,
            "attempts": att,
            "transitions": tx,
            "actions": [],
        }

    def log_file(self, job: str, attempt: int | None = None) -> Path:
        return self.state_dir / "logs" / f"{job}.{attempt or ROWS[job][1]}.log"

    def close(self) -> None:
        self.closed = True

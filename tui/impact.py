"""Textual-free impact of a verb: jobs touched, downstream, critical, deadlines."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from tui.labels import fmt_clock
from tui.view_model import JobsModel
from wloadctl.core.dag import Dag
from wloadctl.core.holds import says_held
from wloadctl.core.states import TERMINAL, JobState, SlaTier
from wloadctl.core.verbs import ITERATING, VERB_FROM, applicable_verbs

S = JobState
VERB_KEYS: dict[str, str] = {
    "hold": "h",
    "release": "r",
    "retry": "t",
    "rerun": "R",
    "kill": "x",
    "set-ok": "o",
    "skip": "s",
}
"""One key per verb (shown in the footer and the help screen)."""

DESTRUCTIVE: frozenset[str] = frozenset({"kill", "set-ok", "skip", "rerun"})
"""Verbs whose confirmation defaults to No: they throw work away or declare it done."""

EFFECT: dict[str, str] = {
    "hold": "will not start until released; their downstream waits",
    "release": "may start as soon as their dependencies allow",
    "retry": "run again; jobs blocked by their failure are reopened",
    "rerun": "run again",
    "kill": "are killed now; without a retry they fail and block their downstream",
    "set-ok": "are declared SUCCEEDED without running; their downstream starts",
    "skip": "are SKIPPED; their downstream treats them as done",
}
"""What a verb does to the jobs it applies to, in words."""

_REOPENS = frozenset({"retry", "rerun", "set-ok", "skip"})
"""Verbs that reopen jobs below the ones they apply to."""


@dataclass(frozen=True)
class DeadlineMove:
    """A deadline an action puts at stake."""

    job: str
    """The job that has the deadline."""
    text: str
    """The deadline as written in the plan."""
    at: float
    """Its absolute time."""
    direct: bool
    """True when the job itself is acted on, False when it is downstream."""


@dataclass
class Impact:
    """What a verb on some jobs would do, as the confirmation dialog shows it."""

    verb: str
    """The verb."""
    downstream: bool
    """Rerun with everything downstream."""
    applies: list[str] = field(default_factory=list)
    """Jobs the verb applies to."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(job, why) for jobs it does not apply to."""
    affected: list[str] = field(default_factory=list)
    """Downstream jobs that change too (reopened, blocked, released)."""
    held: list[str] = field(default_factory=list)
    """Downstream jobs an operator's hold (or a confirmation) keeps HELD through the verb, until released."""
    critical_tier: int = 0
    """Jobs of the critical SLA tier among those touched or affected."""
    critical_path: int = 0
    """Jobs on the run's critical path among those touched or affected."""
    deadlines: list[DeadlineMove] = field(default_factory=list)
    """Deadlines at stake, soonest first."""
    second: bool = False
    """The run's four eyes name the verb (or a job it reaches does): confirming files a request another admin must
    approve."""
    waits: list[str] = field(default_factory=list)
    """Jobs a skip or set-ok applies to whose upstreams have not all ended: it takes effect once they have (the
    jobs never run; their downstream waits with them: wloadctl.core.forcing)."""
    gated: list[str] = field(default_factory=list)
    """Jobs it would act on (those chosen, and with rerun's downstream every job below them) whose own `four_eyes:`
    name the verb."""

    @property
    def destructive(self) -> bool:
        """Whether the dialog defaults to No."""
        return self.verb in DESTRUCTIVE

    @property
    def total(self) -> int:
        """Jobs touched in all."""
        return len(self.applies) + len(self.affected)

    def lines(self, limit: int = 6) -> list[str]:
        """The impact in plain sentences (the dialog's body)."""
        out: list[str] = []
        if self.applies:
            names = ", ".join(self.applies[:limit]) + (
                f" and {len(self.applies) - limit} more"
                if len(self.applies) > limit
                else ""
            )
            out.append(f"{self.verb} {len(self.applies)} job(s): {names}")
            if self.gated:
                names = ", ".join(self.gated[:limit]) + (
                    f" and {len(self.gated) - limit} more" if len(self.gated) > limit else ""
                )
                out.append(f"four eyes of {names}: {self.verb} of them needs a second person")
            if self.second:
                # Four eyes: nothing happens to the jobs until a second person approves.
                out.append(
                    "FOUR EYES: y only files a request; nothing is done to them until another admin "
                    "approves it (A, or `wloadctl approve R<n>`)"
                )
            else:
                out.append(f"they {EFFECT[self.verb]}")
            if self.waits:
                names = ", ".join(self.waits[:limit]) + (
                    f" and {len(self.waits) - limit} more" if len(self.waits) > limit else ""
                )
                said = "set ok" if self.verb == "set-ok" else "skipped"
                out.append(
                    f"{len(self.waits)} of them ({names}) wait for their upstreams to end first: "
                    f"{said} then, never run; their downstream waits with them"
                )
        else:
            out.append(f"{self.verb} applies to none of the selected jobs")
        if self.affected:
            what = {
                "hold": "will wait behind them",
                "kill": "would be blocked if they fail",
                "rerun": "run again"
                if self.downstream
                else "are reopened (blocked by them)",
                "retry": "are reopened (blocked by them)",
                "release": "may then run",
                "set-ok": "may then run",
                "skip": "may then run",
            }[self.verb]
            kept = f"; {len(self.held)} held job(s) stay held until released" if self.held else ""
            out.append(f"downstream: {len(self.affected)} job(s) {what}{kept}")
        elif self.verb == "rerun" and not self.downstream:
            out.append(
                "downstream: finished jobs below keep their results (d reruns them too)"
            )
        out.append(
            f"critical: {self.critical_tier} in the critical tier, "
            f"{self.critical_path} on the "
            "critical path"
        )
        if self.deadlines:
            shown = [
                f"{d.job} {d.text} ({fmt_clock(d.at)})" for d in self.deadlines[:limit]
            ]
            more = (
                f" and {len(self.deadlines) - limit} more"
                if len(self.deadlines) > limit
                else ""
            )
            out.append("deadlines at stake: " + ", ".join(shown) + more)
        else:
            out.append("deadlines at stake: none")
        for _job, why in self.refused[:limit]:
            out.append(f"not applied: {why}")
        if len(self.refused) > limit:
            out.append(f"not applied: {len(self.refused) - limit} more job(s)")
        return out


def is_moot(verb: str, names: Sequence[str], model: JobsModel) -> bool:
    """Whether a request waiting for a second person's approve would now do nothing: every job it names is
    in a state its verb does not apply to (a kill of a job that has since ended). The scheduler keeps such
    a request; its approve is refused job by job.

    Args:
        verb: the verb asked for.
        names: the job ids it names (none: the whole run; a glob: not judged).
        model: the jobs' states now.

    Returns:
        True when it is moot.
    """
    allowed = VERB_FROM.get(verb)
    if allowed is None or not names or any(set(n) & set("*?[") or n not in model.index for n in names):
        return False
    state, index = model.state, model.index
    return all(state[index[n]] not in allowed for n in names)


def impact(
    verb: str,
    jobs: Sequence[int],
    model: JobsModel,
    dag: Dag,
    downstream: bool = False,
    gated: Collection[str] = frozenset(),
) -> Impact:
    """Work out what `verb` would do, from the console's copy of the states.

    It mirrors the engine's rules (which states a verb applies to, what it reopens)
    closely enough to warn; the scheduler still decides, and its answer is shown after.
    Jobs are taken by index and the graph is walked once for all of them, so a glob
    naming thousands of jobs of a big run costs about one pass over it.

    Args:
        verb: one of VERB_KEYS.
        jobs: the selected jobs' indices in the model.
        model: the jobs' states.
        dag: the plan's graph.
        downstream: for rerun, whether finished downstream jobs run again too.
        gated: the jobs whose own `four_eyes:` name the verb (the scheduler's whoami says): those among the jobs
            it reaches (the chosen ones, and with rerun's downstream every job below them, whatever its state:
            the scheduler counts them all, wloadctl.core.reach) make it a request for a second person.

    Returns:
        The impact.
    """
    imp = Impact(verb, downstream and verb == "rerun")
    allowed = VERB_FROM[verb]
    ids = model.ids
    # One copy of the states: the UI thread goes on applying transitions meanwhile.
    st_of = bytes(model.state)
    refusal: dict[int, str] = {}  # the words after the job's name, per state
    chosen: list[int] = []
    iterating = model.loops if verb == "hold" else frozenset()
    for i in jobs:
        st = st_of[i]
        if st in allowed or (i in iterating and st in ITERATING):
            chosen.append(i)
            continue
        job = ids[i]
        if st not in refusal:
            others = applicable_verbs(JobState(st))
            would = f"; {', '.join(others)} would apply" if others else ""
            refusal[st] = f" is {JobState(st).name}: {verb} does not apply{would}"
        imp.refused.append((job, f"'{job}'{refusal[st]}"))
    if imp.downstream:
        chosen = _not_started_below(imp, chosen, model, dag, st_of)
    if verb in ("retry", "rerun"):
        keep = TERMINAL if imp.downstream else frozenset({S.UPSTREAM_FAILED})
    elif verb in ("hold", "kill"):
        keep = frozenset(S) - TERMINAL
    else:
        keep = frozenset({S.WAITING, S.UPSTREAM_FAILED})
    kept = bytes(s in keep for s in range(256))
    under = _below(dag, model, chosen)
    below = sorted(i for i in under if kept[st_of[i]])
    if verb in ("skip", "set-ok"):
        imp.waits = [ids[i] for i in chosen if _upstream_running(dag, model, i, st_of)]
    imp.applies = [ids[i] for i in chosen]
    imp.affected = [ids[i] for i in below]
    if gated:
        reach = dict.fromkeys(jobs)
        if imp.downstream:
            reach.update(dict.fromkeys(_below(dag, model, list(jobs))))
        imp.gated = [ids[i] for i in reach if ids[i] in gated]
    if verb in _REOPENS:  # (a held job they reopen comes back HELD: core/holds.py)
        reason, held = model.reason, int(S.HELD)
        imp.held = [ids[i] for i in sorted(under) if (kept[st_of[i]] or st_of[i] == held) and says_held(reason[i])]
    touched = chosen + below
    tier, crit_value = model.tier, int(SlaTier.CRITICAL)
    imp.critical_tier = sum(1 for i in touched if tier[i] == crit_value)
    imp.critical_path = len(model.critical.intersection(touched))
    moves = []
    if model.deadline:
        direct = set(chosen)
        for i in touched:
            at = model.deadline.get(i)
            if at is not None:
                moves.append(DeadlineMove(ids[i], model.deadline_text.get(i, ""), at, i in direct))
    imp.deadlines = sorted(moves, key=lambda d: d.at)
    return imp


def _not_started_below(
    imp: Impact, chosen: list[int], model: JobsModel, dag: Dag, st_of: bytes
) -> list[int]:
    """The chosen jobs a rerun with their downstream applies to; the others go to `imp.refused`.

    The engine's rule (wloadctl.core.verbs, _started_downstream): such a rerun is refused while a
    downstream job of it is QUEUED or RUNNING, as that job would not wait for it.
    """
    started_states = (int(S.QUEUED), int(S.RUNNING))
    ids, kept = model.ids, []
    for i in chosen:
        started = [d for d in _below(dag, model, [i]) if st_of[d] in started_states]
        if not started:
            kept.append(i)
            continue
        shown = ", ".join(f"'{ids[d]}' ({JobState(st_of[d]).name})" for d in started[:3])
        more = f" and {len(started) - 3} more" if len(started) > 3 else ""
        imp.refused.append(
            (
                ids[i],
                f"'{ids[i]}' not rerun: downstream {shown}{more} started and would not "
                "wait for it; let them end or kill them first",
            )
        )
    return kept


_ENDED = bytes(1 if s in TERMINAL else 0 for s in range(256))


def _upstream_running(dag: Dag, model: JobsModel, i: int, st_of: bytes) -> bool:
    """Whether job i waits (WAITING, or HELD) for an upstream that has not ended."""
    if st_of[i] not in (int(S.WAITING), int(S.HELD)) or model.ids[i] not in dag:
        return False
    index = model.index
    return any(u in index and not _ENDED[st_of[index[u]]] for u in dag.upstream_of(model.ids[i]))


def _below(dag: Dag, model: JobsModel, chosen: list[int]) -> list[int]:
    """Model indices of the jobs downstream of the chosen ones, in one walk of the graph.

    The console's graph shares the model's index when it was read from the run's shape;
    one read from the plan has its own, and jobs the run made since are in neither.
    """
    if dag.index is model.index:
        return dag.below(chosen)
    ids, index = model.ids, model.index
    starts = [dag.index[ids[i]] for i in chosen if ids[i] in dag]
    return [index[j] for j in map(dag.ids.__getitem__, dag.below(starts)) if j in index]

"""An operator's skip or set-ok of a job whose upstreams have not all ended: it waits for them, then ends so.

`skip JOB` and `set-ok JOB` say "do not run this job", not "cut it out of the flow". Of a job one of whose upstreams
has not ended (WAITING, or HELD with unmet dependencies) the verb takes effect once every upstream has ended: the
job stays WAITING meanwhile, and so does its downstream; then it ends SKIPPED or SUCCEEDED without running, as an
immediate skip or set-ok ends it. An upstream that fails meanwhile does not undo the operator's word about this
job (it never runs either way): the job still gets its forced outcome once the last upstream has ended, and its
downstream goes on from there. `release` or `rerun` of the job calls the pending verb off (the job then runs after
its upstreams, or ends UPSTREAM_FAILED, as any job; a confirmation job waits for its approve again); `hold` calls it
off too (the job is HELD instead), a later skip or set-ok replaces it, and a cancel ends the job.

It is journaled like a hold: the operator's action row, and a WAITING -> WAITING transition whose reason says what
waits (`will be set ok when its upstreams end, by alice: known ok`), which is what `why`, `status` and the console
show of the job. A resume reads it back from the job's last transition (`forced_journaled`), a call-off or the
forced end being later transitions of the same job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wloadctl.core.states import JobState

S = JobState

FORCING_VERBS = frozenset({"skip", "set-ok"})
"""Verbs that end a job without running it, and wait for its upstreams when they have not all ended."""
CALLS_OFF = frozenset({"release", "rerun"})
"""Verbs that, applied to a job whose skip or set-ok waits for its upstreams, call that off (so does `hold`)."""
_WORDS = {int(S.SUCCEEDED): "set ok", int(S.SKIPPED): "skipped"}
_WILL_BE = "will be "
_WHEN = " when its upstreams end"
CALLED_OFF = "called off"
"""In the outcome of a release or rerun that called a pending skip or set-ok off (core/holds.py reads it)."""


@dataclass(frozen=True, slots=True)
class Forced:
    """A skip or set-ok waiting for its job's upstreams to end."""

    to: int
    """The state the job ends in: SUCCEEDED (set-ok) or SKIPPED (skip)."""
    user: str = ""
    """Who asked ("" when unknown)."""
    reason: str = ""
    """Why, as the operator gave it."""

    @property
    def words(self) -> str:
        """`set ok` or `skipped`."""
        return _WORDS[self.to]

    @property
    def verb(self) -> str:
        """`set-ok` or `skip`."""
        return "set-ok" if self.to == S.SUCCEEDED else "skip"

    def _by(self) -> str:
        return (f" by {self.user}" if self.user else "") + (f": {self.reason}" if self.reason else "")

    def pending(self) -> str:
        """What the job's WAITING transition says (and `why`, `status` and the console show)."""
        return f"{_WILL_BE}{self.words}{_WHEN}{',' if self.user else ''}{self._by()}"

    def ended(self, failed: Iterable[str] = ()) -> str:
        """The reason of the job's end once its upstreams have ended (`failed`: those that did not succeed)."""
        bad = list(failed)
        tail = f"; upstream {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''} did not succeed" if bad else ""
        return f"{self.words}{self._by()} (asked while its upstreams ran; they have ended{tail})"


def forced_of(reason: str) -> Forced | None:
    """The pending skip or set-ok a WAITING transition's reason says (Forced.pending), if it says one."""
    if not reason.startswith(_WILL_BE):
        return None
    rest = reason[len(_WILL_BE):]
    for to, words in _WORDS.items():
        head = f"{words}{_WHEN}"
        if not rest.startswith(head):
            continue
        by, user = rest[len(head):], ""
        if by.startswith(", by "):
            # (a user name holds no ": ": `broker:alice`, `alice@host`)
            user, _, by = by[len(", by "):].partition(": ")
            return Forced(to, user, by)
        return Forced(to, "", by.removeprefix(": "))
    return None


def forced_journaled(last: Mapping[int, tuple]) -> dict[int, Forced]:
    """The skips and set-oks still waiting for their jobs' upstreams, by each job's last journaled transition.

    Args:
        last: the last transition (from, to, attempt, ts, executor, exit_code, reason, ...) of each job an applied
            skip or set-ok named (the run's actions name them).

    Returns:
        job index -> its pending verb, for the jobs whose last transition left them WAITING on one.
    """
    out: dict[int, Forced] = {}
    for i, t in last.items():
        if t[1] == S.WAITING and (f := forced_of(t[6] or "")) is not None:
            out[i] = f
    return out


def forced_candidates(actions: Iterable[tuple], index: Mapping[str, int]) -> set[int]:
    """The jobs an applied skip or set-ok named, by the run's actions (ts, user, verb, job, reason, outcome,
    applied): those whose last transition may leave them waiting on it (`forced_journaled`)."""
    return {i for a in actions if a[6] and a[2] in FORCING_VERBS and (i := index.get(a[3])) is not None}

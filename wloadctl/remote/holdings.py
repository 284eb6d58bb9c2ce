"""What an agent's beats say of the tasks it holds, against those its scheduler placed on it; and two live agents
beating under one name.

Every beat lists what the agent holds. A task the scheduler placed on an agent (the agent accepted it) that its
beats stop listing went with an agent process that is gone while the name lives on: an agent started again under
the name with no record of it (its state directory lost), or the other of two agents sharing the name died. The
name is heard, so it is never declared lost: the task is, once the beats have gone on without it for the grace (a
report of its end may be on its way, and a beat sent just before the agent took a task does not list it yet).

Two agents of one name are told apart by the boot id each draws as it starts: beats of one boot, then another,
then the first again come from two live processes, which is said (an agent started again never beats under its
old boot).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wloadctl.remote.messages import Heartbeat

Task = tuple[int, int]
"""(job, attempt) of a run."""


def sender_of(hb: Heartbeat) -> str:
    """Which agent process sent a beat: its boot id (host and pid from an agent that sends none)."""
    return hb.boot or f"{hb.host}:{hb.pid}"


@dataclass
class Holdings:
    """One agent name's beats as they bear on its tasks of a run."""

    run: str
    """The run whose tasks are compared."""
    timeout: float
    """The agent timeout: a boot not heard for that long is gone."""
    heard: dict[str, float] = field(default_factory=dict)
    """When each boot beating under the name was heard last (those heard within the timeout)."""
    hosts: dict[str, str] = field(default_factory=dict)
    """Each boot's host and pid, as said."""
    listed: dict[str, frozenset[Task] | None] = field(default_factory=dict)
    """The run's tasks each boot's last beat listed (None: the list was cut short, so nothing is judged)."""
    last: str = ""
    """The boot heard last."""
    twins: bool = False
    """Two boots beat under the name, each heard after the other: two live agents share it."""
    beats: int = 0
    """Beats heard of the name."""
    absent: dict[Task, tuple[float, int]] = field(default_factory=dict)
    """Tasks placed on the name that its beats do not list, with when that was first seen and the beats heard
    by then."""

    def hear(self, hb: Heartbeat, now: float) -> bool:
        """Take a beat of the name.

        Returns:
            True when it shows, for the first time, a second live agent of the name.
        """
        who = sender_of(hb)
        for boot, when in list(self.heard.items()):
            if now - when > self.timeout and boot != who:
                del self.heard[boot], self.listed[boot], self.hosts[boot]
        back = who != self.last and who in self.heard
        self.heard[who] = now
        self.hosts[who] = f"{hb.host} pid {hb.pid}"
        self.listed[who] = (frozenset((int(job), int(att)) for run, job, att in hb.held if run == self.run)
                            if hb.jobs_held <= len(hb.held) else None)
        self.last = who
        self.beats += 1
        new = back and not self.twins
        self.twins = len(self.heard) > 1 and (self.twins or back)
        return new

    def others(self) -> list[str]:
        """Host and pid of every live agent of the name, when two or more share it ([] otherwise)."""
        return sorted(self.hosts.values()) if self.twins else []

    def missing(self, placed: set[Task], now: float, grace: float) -> list[Task]:
        """Tasks placed on the name that its beats have not listed for `grace` seconds, and two beats at least.

        (An agent that stalls does not beat; a beat in flight when the task was placed may not list it yet.)

        Args:
            placed: The run's tasks the scheduler has on this agent (accepted, not ended).
            now: The scheduler's time.
            grace: Seconds a task may go unlisted (a report of its end on its way).
        """
        boots = list(self.heard) if self.twins else [self.last] if self.last else []
        lists = [self.listed.get(b) for b in boots]
        if not lists or any(x is None for x in lists):
            self.absent.clear()  # nothing to judge by: a list cut short, or no beat yet
            return []
        held: set[Task] = set().union(*lists)  # type: ignore[arg-type]
        for key in [k for k in self.absent if k not in placed or k in held]:
            del self.absent[key]
        for key in placed - held:
            self.absent.setdefault(key, (now, self.beats))
        return sorted(k for k, (since, beats) in self.absent.items()
                      if now - since >= grace and self.beats - beats >= 2)

    def forget(self) -> None:
        """Start the count of unlisted tasks afresh (the beats could not come: the broker was away)."""
        self.absent.clear()

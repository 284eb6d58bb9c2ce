"""What running jobs hold: declared resources, the slots of the places they run on (this host, pools, agents),
and their cpu and memory claims out of the run's share of the host (`wloadctl host --cpus/--memory`)."""

from __future__ import annotations

from collections.abc import Callable

from wloadctl.core.plan import JobSpec

Needs = tuple[tuple[str, int], ...]
"""What a job holds while it runs: (resource or place, amount) pairs."""
LOCAL_PLACE = "pool:local"
"""The place of jobs that run on this host's executors."""
HOST_CPU = "host:cpu"
"""The run's share of the host's CPUs, in thousandths of a CPU."""
HOST_MEMORY = "host:memory"
"""The run's share of the host's memory, in MiB."""
HOST_UNLIMITED = 1 << 40
"""A share of cpu or memory that the host does not limit."""


def host_claim(spec: JobSpec) -> Needs:
    """What a job claims of the host's cpu (thousandths) and memory (MiB); nothing when it runs elsewhere."""
    if spec.agent or spec.pool or not (spec.cpu or spec.memory):
        return ()
    out: list[tuple[str, int]] = []
    if spec.cpu:
        out.append((HOST_CPU, max(1, round(spec.cpu * 1000))))
    if spec.memory:
        out.append((HOST_MEMORY, spec.memory))
    return tuple(out)


def place_of(spec: JobSpec) -> str:
    """Where a job runs: `agent:NAME` when pinned, `pool:NAME` for a pool of agents, else this host."""
    if spec.agent:
        return f"agent:{spec.agent}"
    if spec.pool:
        return f"pool:{spec.pool}"
    return LOCAL_PLACE


class Resources:
    """Owns every resource and place: what each offers, what is free, who holds it, who waits for it.

    Places (`pool:NAME`, `agent:NAME`, this host) are resources too, once a plan runs anything
    on agents: then every job claims one slot of its place beside its declared resources. The
    engine asks it to acquire and release a job's needs; the jobs it hands back (parked while
    what they lack was taken) are the engine's to requeue.
    """

    def __init__(self, declared: dict[str, int]) -> None:
        self.res_free: dict[str, int] = dict(declared)
        """Free amount of each resource and place."""
        self.res_holders: dict[str, set[int]] = {r: set() for r in declared}
        """Jobs holding each resource now."""
        self.parked: dict[str, list[int]] = {r: [] for r in declared}
        """READY jobs waiting for a resource, by the resource they lack."""
        self.res_waiter: dict[str, int] = {}
        """Ready key of the most urgent job waiting for each resource: less urgent jobs may not take it
        meanwhile, so a job asking for much is not overtaken forever by small ones."""
        self.capacity_of: dict[str, int] = dict(declared)
        """What each resource and place offers in all (places change as agents come and go)."""
        self.claims: dict[int, Needs] = {}
        """Jobs whose dispatch needs more than their declared resources: their place too (only when the
        plan runs anything on agents; then every job claims one slot of its place), their cpu and memory
        out of the host's share (only once the host limits them)."""
        self.places = False
        """Every job claims a slot of its place (the plan runs something on agents)."""
        self.host = False
        """Jobs on this host claim their cpu and memory out of the run's share of the host."""
        self.host_returns = False
        """Other runs wait for the host's cpu or memory: what a job gives back of them leaves the run's share
        (the host shares it again at the next beat) instead of going to this run's next job."""

    def needs(self, i: int, declared: Needs) -> Needs:
        """What job i holds while it runs: its `declared` resources, and a slot of its place when places apply."""
        claims = self.claims
        if claims:
            c = claims.get(i)
            if c is not None:
                return c
        return declared

    def acquire(self, i: int, want: Needs, key: int) -> bool:
        """Take every resource job i asks for, or none; a job that cannot becomes its resource's waiter.

        Args:
            i: job index.
            want: what it needs.
            key: its ready key (lower is more urgent).

        Returns:
            True when it holds them all now; False when it was parked on the first it lacks.
        """
        free, waiter = self.res_free, self.res_waiter
        for name, amount in want:
            w = waiter.get(name)
            if free[name] < amount or (w is not None and w < key):
                self.parked[name].append(i)
                if w is None or key < w:
                    waiter[name] = key
                return False
        for name, amount in want:
            free[name] -= amount
            self.res_holders[name].add(i)
            if waiter.get(name) == key:
                del waiter[name]
        return True

    def release(self, i: int, held: Needs) -> list[int]:
        """Job i gives back what it `held`; returns the jobs parked on those resources, to compete again."""
        woken: list[int] = []
        for name, amount in held:
            self.res_holders[name].discard(i)
            if self.host_returns and name.startswith("host:"):
                self.capacity_of[name] -= amount
                continue
            self.res_free[name] += amount
            parked = self.parked[name]
            woken.extend(parked)
            parked.clear()
            self.res_waiter.pop(name, None)  # the parked jobs compete again, most urgent first
        return woken

    def hold(self, i: int, held: Needs) -> None:
        """Job i holds `held` already (restored from a journal while it runs)."""
        for name, amount in held:
            self.res_free[name] -= amount
            self.res_holders[name].add(i)

    def claim(self, i: int, spec: JobSpec) -> bool:
        """Job i (its spec given) claims, beside its declared resources, a slot of its place when places
        apply and its cpu and memory when the host shares them.

        Returns:
            Whether it claims anything beyond its declared resources.
        """
        extra: Needs = ()
        if self.places:
            place = place_of(spec)
            if place not in self.capacity_of:
                self.add_place(place, 0)
            extra = ((place, 1),)
        if self.host:
            extra += host_claim(spec)
        if extra:
            self.claims[i] = (*spec.resources, *extra)
        return bool(extra)

    def share_host(self, specs: list[JobSpec], active: Callable[[int], bool]) -> list[int]:
        """From now on jobs on this host claim their cpu and memory out of the run's share of the host.

        Args:
            specs: every job's spec.
            active: whether job i is QUEUED or RUNNING (it holds its claim at once).

        Returns:
            The jobs that claim something now.
        """
        self.host = True
        for name in (HOST_CPU, HOST_MEMORY):
            if name not in self.capacity_of:
                self.add_place(name, 0)
        out = []
        for i, spec in enumerate(specs):
            hc = host_claim(spec)
            if hc:
                self.claim(i, spec)
                out.append(i)
                if active(i):
                    self.hold(i, hc)
        return out

    def add_place(self, place: str, slots: int) -> None:
        """A place offering `slots`, none taken."""
        self.capacity_of[place] = slots
        self.res_free[place] = slots
        self.res_holders[place] = set()
        self.parked[place] = []

    def set_capacity(self, place: str, slots: int) -> tuple[int, list[int]]:
        """A place now offers `slots`.

        Returns:
            The change in its slots, and the jobs parked on it when it grew (they compete again).
        """
        if place not in self.capacity_of:
            self.add_place(place, 0)
        delta = slots - self.capacity_of[place]
        if not delta:
            return 0, []
        self.capacity_of[place] = slots
        self.res_free[place] += delta
        woken: list[int] = []
        if delta > 0:
            woken = list(self.parked[place])
            self.parked[place].clear()
            self.res_waiter.pop(place, None)
        return delta, woken

    def check(self, needs: Callable[[int], Needs]) -> None:
        """Assert that nothing leaked: what holders hold plus what is free is what each resource offers.

        Args:
            needs: what a job holds while it runs, by job index.
        """
        for name, cap in self.capacity_of.items():
            held = sum(a for j in self.res_holders[name] for r, a in needs(j) if r == name)
            assert held + self.res_free[name] == cap, (
                f"resource {name} leaks: {held} held + {self.res_free[name]} free != {cap}"
            )

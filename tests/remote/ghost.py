"""A stand-in agent for tests: a bare broker link that beats as an agent and takes dispatches, running nothing.

It plays an agent that takes a task and is never heard of again (killed, or started again without its state),
which a real agent cannot be made to do at a chosen moment.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tests.remote.conftest import collect
from wloadctl.remote import messages as M
from wloadctl.remote.broker import BrokerOptions, Subjects, ensure_streams
from wloadctl.remote.link import BrokerLink

if TYPE_CHECKING:
    from wloadctl.remote.pulling import Msg


class Ghost:
    """An agent named `name` serving `pools`, one slot each, as far as the scheduler can tell."""

    def __init__(self, url: str, pools: list[str], name: str = "ghost") -> None:
        self.subj = Subjects()
        """The installation's subjects (the default prefix)."""
        self.link = BrokerLink.open(BrokerOptions(url), name=name)
        """Its link to the broker."""
        self.name = name
        self.pools = pools
        ensure_streams(self.link, self.subj)

    def beat(self, boot: str = "") -> None:
        """One heartbeat (`boot`: the process it says it is; another value is the agent started again)."""
        hb = M.Heartbeat(agent=self.name, pools=self.pools, slots_used=0, slots_total=len(self.pools), cpus=0.0,
                         memory_mb=0, load1=0.0, rss_kb=0, mem_free_mb=0, jobs_held=0, held=[], epoch_seen=0,
                         heard_active=0.0, pid=1, host=self.name, version="0", sent=time.time(), boot=boot)
        self.link.publish(self.subj.hb(self.name), hb.encode())

    def take(self, pool: str, boot: str = "", timeout: float = 30.0) -> Msg:
        """Wait (beating) for one dispatch of `pool`, acknowledge it, as an agent does once it has journaled the
        task, and pull no more; the message taken."""
        puller = self.link.pull(self.subj.dispatch_stream, self.subj.pool_consumer(pool),
                                self.subj.dispatch_pool(pool), window=1)
        try:
            deadline = time.time() + timeout
            while time.time() < deadline:
                self.beat(boot)
                taken = [m for m in collect(self.link, 1, timeout=0.5) if m.jetstream]
                if taken:
                    taken[0].ack()
                    return taken[0]
            raise AssertionError(f"no dispatch of pool {pool} reached agent {self.name} in {timeout:g}s")
        finally:
            puller.stop()

    def close(self) -> None:
        """Close its link (it is silent from then on)."""
        self.link.close()

    def __enter__(self) -> Ghost:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

"""Remote execution over a NATS JetStream broker: options, subjects, the sync bridge, wire layouts.

This package is the only one that imports `nats`, and only when a link is opened or streams
are made, so verbs that never reach a broker never load the client.

* `broker`: BrokerOptions and their command-line options, Subjects, ensure_streams.
* `link`: BrokerLink, a NATS client on its own asyncio thread bridged to synchronous loops.
* `wire`: byte layouts of dispatch and result batches; `messages`: heartbeat and ctl bodies.
* `agents`: the liveness judgement of an agent and the `wloadctl agents` listing.
"""

AGENT_BASE = 1000
"""Engine executor index of a run's first agent: indices below are the scheduler host's own executors (here, not
in `agents`, so what only needs the number does not load the agents' modules)."""

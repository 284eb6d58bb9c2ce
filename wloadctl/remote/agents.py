"""Whether an agent is alive, judged from the age of its last heartbeat, and the `wloadctl agents` listing.

Agents beat once a second. One that has been silent for more than half the agent
timeout (5 s by default) has missed several beats in a row: that is worth showing
(SUSPECT) but not yet acting on, since a long pause of the host or a broker restart
looks the same for a while. Silent for more than the whole timeout (10 s by default) it
is LOST: its unfinished jobs are retried elsewhere under their policy. `agent_state` is
the one place that judgement is made; pools and the CLI both call it.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from wloadctl.errors import ControlError, ProtocolError, UsageError, WloadError
from wloadctl.remote import AGENT_BASE  # noqa: F401 - kept importable from here
from wloadctl.remote.broker import BrokerOptions, Subjects, timeout_arg
from wloadctl.remote.messages import Heartbeat

if TYPE_CHECKING:
    from wloadctl.remote.link import BrokerLink
    from wloadctl.store.base import Store

DEFAULT_AGENT_TIMEOUT = 10.0
"""Seconds of silence after which an agent is LOST (`--agent-timeout`)."""
MIN_AGENT_TIMEOUT = 2.0
"""The shortest agent timeout a run takes: two of the agents' beats (a live agent is not LOST between two), and
ample beyond the time a dead agent's executors may still start what they hold (agent.AGENT_SILENT_START and the
beat they read late): a task the run gives to another agent then does not also start there."""
SUSPECT_FRACTION = 0.5
"""Share of the agent timeout after which a silent agent is SUSPECT."""
AGENTS_CONNECT_TIMEOUT = 3.0
"""Default `--broker-timeout` of the quick looks at the agents (`agents`, `drill agent-loss`)."""


AGENTS_FILE = "agents.json"
"""File of a state directory where schedulers before the journal kept the agents' numbers (agent name ->
executor index): read only for the runs they numbered (the journal numbers them now: Store.agent_index)."""
NODES_FILE = "nodes.json"
"""File of a run's state directory where its scheduler writes the agents as it judges them, every second."""
LOG_SLICE = 512 * 1024
"""Bytes of a log asked for in one request (a reply must fit a broker message)."""

def node_names(state_dir: Path) -> dict[int, str]:
    """Executor index -> agent name, as a scheduler before the journal numbered the agents (its AGENTS_FILE)."""
    try:
        return {int(v): k for k, v in json.loads((state_dir / AGENTS_FILE).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def run_agent_names(store: Store, run: int, state_dir: Path | None) -> dict[int, str]:
    """Executor index -> agent name of a run: the journal's numbering (the same on every host), and for
    the indexes it lacks, those of the state directory's agents file (a run numbered before the journal)."""
    names = store.agent_names(run)
    if state_dir is not None:
        for index, name in node_names(state_dir).items():
            if index not in names and name not in names.values():
                names[index] = name
    return names


def read_nodes(state_dir: Path, now: float) -> list[dict[str, Any]]:
    """The agents of a live run as its scheduler last judged them ([] when it has none, or stopped writing)."""
    try:
        data = json.loads((state_dir / NODES_FILE).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or now - float(data.get("written", 0)) > 10.0:
        return []
    return [dict(r) for r in data.get("agents", []) if isinstance(r, dict)]


def broker_lost(state_dir: Path, now: float) -> tuple[str, float] | None:
    """(broker, since when) while the live run's scheduler has lost its broker; None while it has it (or has
    none, or stopped writing its agents down)."""
    try:
        data = json.loads((state_dir / NODES_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or now - float(data.get("written", 0)) > 10.0 or data.get("broker_connected", True):
        return None
    since = data.get("broker_lost_since")
    return str(data.get("broker") or "the broker"), float(since) if isinstance(since, (int, float)) else now


def fetch_log(options: BrokerOptions, agent: str, run: str, job: int, job_id: str, attempt: int, dest: Path,
              timeout: float = 5.0) -> None:
    """Copy a job attempt's log from the agent that ran it into `dest` (its place in the run's state dir).

    Raises:
        ControlError: the broker or the agent did not answer, or the agent has no such log.
    """
    from wloadctl.remote.link import BrokerLink
    from wloadctl.remote.messages import LogsRequest, Reply, split

    try:
        link = BrokerLink.open(options, name=f"logs-{agent}")
    except WloadError as e:
        raise ControlError(f"the log of {job_id} attempt {attempt} is on agent {agent}; the broker "
                           f"{options.shown()} did not answer: {e.message}") from None
    try:
        chunks: list[bytes] = []
        offset = 0
        while True:
            raw = link.request(Subjects(options.prefix).ctl(agent),
                               LogsRequest(run, job, attempt, offset, LOG_SLICE, job_id).encode(), timeout=timeout)
            if raw is None:
                raise ControlError(f"the log of {job_id} attempt {attempt} is on agent {agent}, which did not "
                                   f"answer (see `wloadctl agents --broker {options.shown()}`)")
            rep = Reply.decode(raw)
            if not rep.ok:
                raise ControlError(f"agent {agent}: {rep.error}")
            data = split(raw)[1]
            chunks.append(data)
            offset += len(data)
            if not data or offset >= rep.size:
                break
    finally:
        link.close(timeout=2.0)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.write_bytes(b"".join(chunks))
    tmp.replace(dest)


class AgentState(enum.Enum):
    """How an agent stands, from the age of its last heartbeat."""

    ALIVE = "ALIVE"
    """Heard within the last half agent timeout."""
    SUSPECT = "SUSPECT"
    """Silent for more than half the agent timeout: shown, not yet acted on."""
    LOST = "LOST"
    """Silent for more than the agent timeout: its unfinished jobs are to be retried elsewhere."""
    STOPPED = "STOPPED"
    """Said, as its last beat, that it stopped cleanly (its jobs were reported lost as it stopped)."""


def agent_state(age: float, timeout: float = DEFAULT_AGENT_TIMEOUT) -> AgentState:
    """Judge an agent from the seconds since its last heartbeat.

    Args:
        age: Seconds since the last heartbeat (negative, from clock skew, counts as 0).
        timeout: The agent timeout.

    Returns:
        LOST past `timeout`, SUSPECT past half of it, else ALIVE.
    """
    if age > timeout:
        return AgentState.LOST
    if age > timeout * SUSPECT_FRACTION:
        return AgentState.SUSPECT
    return AgentState.ALIVE


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent as listed: its last heartbeat, how old it is, and the judgement."""

    beat: Heartbeat
    """The last heartbeat stored in the agents bucket."""
    age: float
    """Seconds since it was sent (by the agent's clock against ours)."""
    state: AgentState
    """ALIVE, SUSPECT, LOST or STOPPED."""

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON object: the heartbeat's fields plus `age` and `state`."""
        obj = asdict(self.beat)
        obj["age"] = round(self.age, 3)
        obj["state"] = self.state.value
        return obj


def agent_rows(
    beats: dict[str, bytes], now: float, timeout: float = DEFAULT_AGENT_TIMEOUT
) -> tuple[list[AgentRow], list[str]]:
    """Decode the agents bucket's values and judge each agent.

    Args:
        beats: Value of each key (agent name) of the agents bucket.
        now: Current time, epoch seconds.
        timeout: The agent timeout.

    Returns:
        The rows sorted by name, and one line per value that is not a heartbeat.
    """
    rows: list[AgentRow] = []
    problems: list[str] = []
    for key, value in sorted(beats.items()):
        try:
            beat = Heartbeat.decode(value)
        except ProtocolError as exc:
            problems.append(f"agent {key}: unreadable heartbeat ({exc.one_line()})")
            continue
        age = max(0.0, now - beat.sent)
        rows.append(AgentRow(beat, age, AgentState.STOPPED if beat.stopped else agent_state(age, timeout)))
    return rows, problems


def format_table(rows: list[AgentRow]) -> str:
    """The rows as a small text table (one header line, one line per agent)."""
    head = ("NAME", "POOLS", "SLOTS", "LOAD", "MEM MiB", "FREE MiB", "JOBS", "BEAT", "STATE")
    lines = [head]
    for r in rows:
        b = r.beat
        lines.append((
            b.agent, ",".join(b.pools) or "-", f"{b.slots_used}/{b.slots_total}", f"{b.load1:.2f}",
            str(b.memory_mb or "-"), str(b.mem_free_mb), str(b.jobs_held), f"{r.age:.1f}s", r.state.value,
        ))  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def agents_elsewhere(link: BrokerLink, prefix: str, now: float, timeout: float,
                     pool: str | None = None) -> dict[str, list[str]]:
    """Live agents that beat under other prefixes of the same broker (an agent and a run given different
    `--prefix` never meet): {prefix: [agent names]}, of those serving `pool` when it is given. Empty when the
    broker cannot say. Each ask waits 1 s at most: a scheduler asks from its loop (once a place)."""
    suffix = "-agents"
    try:
        names = link.stream_names(timeout=1.0)
    except WloadError:
        return {}
    out: dict[str, list[str]] = {}
    for stream in sorted(names):
        if not (stream.startswith("KV_") and stream.endswith(suffix)) or stream == f"KV_{prefix}{suffix}":
            continue
        try:
            entries = link.kv.entries(stream[3:], timeout=1.0, missing_ok=True)
        except WloadError:
            continue
        for entry in entries.values():
            try:
                hb = Heartbeat.decode(entry.value)
            except WloadError:
                continue
            if not hb.stopped and agent_state(now - hb.sent, timeout) == AgentState.ALIVE and (
                    pool is None or pool in hb.pools):
                out.setdefault(stream[3:-len(suffix)], []).append(hb.agent)
    return out


def elsewhere_text(found: dict[str, list[str]]) -> str:
    """`agents_elsewhere` in words: under which prefix which agents beat."""
    return "; ".join(f"under prefix '{p}': {', '.join(sorted(names)[:5])}" + (" ..." if len(names) > 5 else "")
                     for p, names in found.items())


def agents_command(ns: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """`wloadctl agents`: list the agents of the agents bucket with their state.

    Returns:
        0 (an empty list is not an error: no agent has started yet).

    Raises:
        UsageError: Bad broker options or timeout (exit 2).
        TransportError: The broker cannot be reached (exit 3: a runtime failure of the
            environment, not of the command line).
    """
    from wloadctl.remote.link import BrokerLink

    if ns.agent_timeout <= 0:
        raise UsageError(f"--agent-timeout must be positive, not {ns.agent_timeout:g}")
    opts = BrokerOptions.from_args(ns)
    subjects = Subjects(opts.prefix)
    with BrokerLink.open(opts, name="wloadctl-agents") as link:
        entries = link.kv.entries(subjects.agents_bucket, missing_ok=True)
        rows, problems = agent_rows({k: e.value for k, e in entries.items()}, time.time(), ns.agent_timeout)
        elsewhere = agents_elsewhere(link, opts.prefix, time.time(), ns.agent_timeout) if not rows else {}
    for line in problems:
        print(f"wloadctl: {line}", file=sys.stderr)
    if ns.json:
        print(json.dumps([r.to_json() for r in rows], indent=2), file=out)
    elif rows:
        print(format_table(rows), file=out)
    else:
        print(f"no agents in {subjects.agents_bucket} on {opts.shown()}", file=out)
        if elsewhere:
            print(f"live agents beat {elsewhere_text(elsewhere)} (give --prefix to list them; a run and its agents "
                  "share one prefix)", file=out)
    return 0


def add_agents_args(p: argparse.ArgumentParser) -> None:
    """Options of `wloadctl agents` besides the broker's."""
    p.add_argument("--json", action="store_true", help="a JSON list of objects")
    p.add_argument(
        "--agent-timeout",
        type=float,
        default=DEFAULT_AGENT_TIMEOUT,
        metavar="S",
        help="seconds of silence before an agent is LOST (SUSPECT after half of it; default 10)",
    )
    # The name this option had before --broker-timeout (AGENTS_CONNECT_TIMEOUT by default here), kept for old scripts.
    p.add_argument("--connect-timeout", dest="broker_timeout", type=timeout_arg, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)

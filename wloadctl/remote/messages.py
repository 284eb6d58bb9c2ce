"""JSON bodies of the broker's small messages: heartbeats and ctl/ask requests and replies.

These travel once a second or on an operator's request, so compact JSON is fast enough
and readable with `nats sub`. Every body carries `"v": VERSION`; a body of another
version, not a JSON object, or with a missing or mistyped field is refused with a
ProtocolError naming the field.

A reply that carries bytes (a job's log) is the JSON object, one NUL byte, then the raw
bytes: JSON text never contains a raw NUL, so the split is unambiguous.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, ClassVar, Literal, TypeVar

from wloadctl.errors import ProtocolError

VERSION = 1
"""Version of the JSON bodies."""

T = TypeVar("T", bound="Body")


@dataclass(slots=True)
class Body:
    """Base of every JSON body: encode to and decode from bytes with checked field types."""

    op: ClassVar[str] = ""
    """The body's kind, written as "op"; empty for bodies that are not requests."""

    def encode(self, data: bytes = b"") -> bytes:
        """The body as compact UTF-8 JSON, then a NUL and `data` when `data` is given."""
        obj = asdict(self)
        obj["v"] = VERSION
        if self.op:
            obj["op"] = self.op
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        return text + b"\0" + data if data else text

    @classmethod
    def decode(cls: type[T], raw: bytes | bytearray | memoryview) -> T:
        """Parse a body of this class (any bytes after a NUL are ignored; see `split`).

        Raises:
            ProtocolError: If the body is not this class's JSON of this version.
        """
        return cls.from_obj(_load(split(raw)[0]))

    @classmethod
    def from_obj(cls: type[T], obj: dict[str, Any]) -> T:
        """Build from a parsed JSON object, checking each field's type.

        Raises:
            ProtocolError: On a missing field or a field of the wrong type.
        """
        name = cls.op or cls.__name__
        kw: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name not in obj:
                if f.default is not MISSING or f.default_factory is not MISSING:  # optional on the wire
                    continue
                raise ProtocolError(f"{name} message lacks field {f.name!r}")
            value = obj[f.name]
            want = _TYPES.get(str(f.type))
            if want is not None and not _fits(value, want):
                raise ProtocolError(f"{name} message field {f.name!r} is {type(value).__name__}, expected {f.type}")
            kw[f.name] = value
        return cls(**kw)


_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list[str]": (list,),
    "list[list[Any]]": (list,),
    "list[dict[str, Any]]": (list,),
    "float | None": (int, float, type(None)),
}


def _fits(value: Any, want: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in want:
        return False
    return isinstance(value, want)


def split(raw: bytes | bytearray | memoryview) -> tuple[bytes, bytes]:
    """Separate a body's JSON from the bytes after its NUL (b"" when none)."""
    data = bytes(raw)
    text, _, rest = data.partition(b"\0")
    return text, rest


def foreign_body(raw: bytes | bytearray | memoryview) -> dict[str, Any] | None:
    """A JSON body of another release (its `"v"` not VERSION) as parsed, for saying who sent it; None when the
    body is of this release or no JSON object at all."""
    try:
        obj = json.loads(split(raw)[0])
    except (UnicodeDecodeError, ValueError):
        return None
    return obj if isinstance(obj, dict) and "v" in obj and obj["v"] != VERSION else None


def _load(text: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"broker message body is not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"broker message body is a {type(obj).__name__}, not an object")
    if obj.get("v") != VERSION:
        raise ProtocolError(
            f"broker message body version {obj.get('v')!r} (expected {VERSION})",
            hint="schedulers, agents and the CLI must come from the same wloadctl release",
        )
    return obj


@dataclass(slots=True)
class Heartbeat(Body):
    """What an agent says about itself every second (core NATS `hb.NAME` and KV `PFX-agents`)."""

    agent: str
    """The agent's name."""
    pools: list[str]
    """Pools it serves."""
    slots_used: int
    """Tasks running now."""
    slots_total: int
    """Tasks it may run at once."""
    cpus: float
    """CPUs it offers."""
    memory_mb: int
    """Memory it offers, MiB."""
    load1: float
    """One-minute load average of its host."""
    rss_kb: int
    """Resident memory of the agent, its executors and jobs, KiB."""
    mem_free_mb: int
    """Available memory of the host, MiB."""
    jobs_held: int
    """Tasks it holds (queued or running), possibly more than listed in `held`."""
    held: list[list[Any]]
    """Up to a few hundred [run, job index, attempt] it holds."""
    epoch_seen: int
    """Highest scheduler epoch it has accepted."""
    heard_active: float
    """When it last heard the active scheduler, epoch seconds (0: never)."""
    pid: int
    """The agent's process id."""
    host: str
    """Its host name."""
    version: str
    """Its wloadctl version."""
    sent: float
    """When this beat was sent, epoch seconds (the agent's clock)."""
    prefetch: int = 0
    """Tasks per slot it takes ahead of its free slots (its scheduler may keep that many more with it)."""
    stopped: bool = False
    """Its last word, kept in the agents bucket: it stopped cleanly (listed STOPPED, not LOST)."""
    boot: str = ""
    """A random id the agent drew as it started: two agents beating under one name have two."""
    host_id: str = ""
    """Which kernel and pid namespace the agent runs in (nodelock.host_identity; empty when unknown): its host
    name and pid alone do not tell a cloned machine, or two containers of one host, from the agent's own host."""


@dataclass(slots=True)
class SchedulerBeat(Body):
    """`beat.RUN` (core NATS): the active scheduler of a run is alive; agents note when they last heard it."""

    run: str
    """Run id."""
    epoch: int
    """Its epoch."""
    pid: int
    """Its process id."""
    host: str
    """Its host name."""
    sent: float
    """When sent, epoch seconds."""


@dataclass(slots=True)
class PairBeat(Body):
    """`pair.RUN` (core NATS): a scheduler of a run's active/standby pair speaks for itself.

    A standby beats while it watches (`standing-by`, or `suspects-partition` while agents
    still hear a silent active) and says `took-over` once the journal granted it the next
    epoch; an active that found itself fenced says `stood-down` as it leaves the run.
    """

    run: str
    """Run id."""
    role: str
    """standby or active."""
    state: str
    """standing-by, suspects-partition or took-over (a standby); stood-down (an active)."""
    host: str
    """Its host name."""
    pid: int
    """Its process id."""
    epoch: int
    """The epoch it follows (a standby), holds after its takeover, or held until it was fenced."""
    sent: float
    """When sent, epoch seconds (its clock)."""
    every: float = 0.0
    """Seconds between a standby's beats (0: a one-off notice)."""
    at: float | None = None
    """took-over: when the journal granted the epoch; stood-down: when it found the newer one."""


@dataclass(slots=True)
class KillRequest(Body):
    """`ctl.NAME`: kill one task attempt (refused below the agent's highest epoch)."""

    op: ClassVar[str] = "kill"
    run: str
    """Run id."""
    job: int
    """Job index."""
    attempt: int
    """Attempt number."""
    signal: int
    """Signal number to send to the job's process group."""
    epoch: int
    """Epoch of the scheduler asking."""


@dataclass(slots=True)
class InventoryRequest(Body):
    """`ctl.NAME` or `ask`: list the tasks held for a run."""

    op: ClassVar[str] = "inventory"
    run: str
    """Run id."""
    epoch: int = 0
    """The asking scheduler's epoch, when it is the run's active one recovering it (0: a look only). An agent
    refuses from then on a dispatch of an older epoch still waiting in the stream, as after that scheduler's beat."""


@dataclass(slots=True)
class LogsRequest(Body):
    """`ctl.NAME`: read a slice of a job attempt's output."""

    op: ClassVar[str] = "logs"
    run: str
    """Run id."""
    job: int
    """Job index."""
    attempt: int
    """Attempt number."""
    offset: int = 0
    """First byte to read; negative counts from the end."""
    max_bytes: int = 65536
    """Most bytes to return."""
    job_id: str = ""
    """Job id (the agent names log files by it)."""


@dataclass(slots=True)
class HearRequest(Body):
    """`ask`: does the agent still hear the active scheduler (a standby asks before taking over)?"""

    op: ClassVar[str] = "hear"
    epoch: int = 0
    """Epoch the asking standby knows of."""
    run: str = ""
    """The run whose scheduler is meant ("": any scheduler)."""


@dataclass(slots=True)
class HeldTask:
    """One task an agent holds, in an inventory reply."""

    job: int
    """Job index."""
    attempt: int
    """Attempt number."""
    epoch: int
    """Epoch of the dispatch it came with."""
    state: Literal["queued", "running", "exited"]
    """Where it stands on the agent."""


@dataclass(slots=True)
class Reply(Body):
    """The answer to any ctl/ask request; `ok` false with `error` when refused."""

    agent: str
    """The answering agent."""
    ok: bool
    """The request was carried out."""
    error: str = ""
    """Why it was refused (an older epoch, an unknown task, ...)."""
    held: list[dict[str, Any]] = field(default_factory=list)
    """Inventory: HeldTask fields per held task."""
    size: int = 0
    """Logs: the log's whole size in bytes (the slice follows the NUL)."""
    heard_active: float | None = None
    """Hear: when it last heard the active scheduler, epoch seconds."""
    epoch_seen: int = 0
    """Highest epoch the agent has accepted."""

    def tasks(self) -> list[HeldTask]:
        """The inventory as HeldTask objects.

        Raises:
            ProtocolError: If an entry is not a held task.
        """
        out = []
        for h in self.held:
            try:
                out.append(HeldTask(int(h["job"]), int(h["attempt"]), int(h["epoch"]), h["state"]))
            except (KeyError, TypeError, ValueError):
                raise ProtocolError(f"inventory entry {h!r} is not a held task") from None
        return out


def reply_agent(raw: bytes | bytearray | memoryview) -> str | None:
    """The agent that sent a reply (None when it is not a reply this release reads)."""
    try:
        return Reply.decode(raw).agent
    except ProtocolError:
        return None


Request = KillRequest | InventoryRequest | LogsRequest | HearRequest
REQUESTS: dict[str, type[Body]] = {c.op: c for c in (KillRequest, InventoryRequest, LogsRequest, HearRequest)}
"""Request classes by their "op"."""


def decode_request(raw: bytes | bytearray | memoryview) -> Request:
    """Parse any ctl/ask request into its class.

    Raises:
        ProtocolError: On a bad body or an unknown op.
    """
    obj = _load(split(raw)[0])
    cls = REQUESTS.get(str(obj.get("op")))
    if cls is None:
        raise ProtocolError(f"unknown request op {obj.get('op')!r} (expected one of {', '.join(REQUESTS)})")
    return cls.from_obj(obj)  # type: ignore[return-value]

"""Where the broker is and what lives on it: connection options, subject names, streams and buckets.

Layout on the broker, under a prefix PFX (one per installation, `wl` by default):

* stream `PFX-dispatch` (work queue, file), subjects `PFX.dispatch.>`: dispatch batches.
  `PFX.dispatch.pool.POOL` is pulled by any agent of the pool through the shared durable
  consumer `pool-POOL`; `PFX.dispatch.agent.NAME` by that agent alone (`agent-NAME`).
* stream `PFX-results` (limits with a max age, file), subjects `PFX.results.RUN`: result
  batches of each run; each scheduler reads with its own durable consumer `sched-ID`.
* `PFX.op.RUN` and `PFX.op.RUN.USER` (core NATS): operator verbs to a run's scheduler, the
  second from broker user USER (see wloadctl.remote.operators for the permissions that make
  it that user's alone).
* `PFX.pair.RUN` (core NATS): what the schedulers of a run's active/standby pair say about
  themselves: a standby's beats, its takeover, a fenced active standing down (a failover
  drill of another host watches them).
* `PFX.hb.NAME` (core NATS): heartbeats; `PFX.ctl.NAME` and `PFX.ask`: request/reply to
  one agent and to all.
* KV `PFX-leader`: current epoch and holder (compare-and-set); KV `PFX-agents`: each
  agent's last heartbeat, key = agent name. Both file-backed, history 1.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wloadctl.errors import UsageError
from wloadctl.urls import split_url, without_password

if TYPE_CHECKING:
    from wloadctl.remote.link import BrokerLink

NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""Prefixes, pool, agent and run names: safe in subjects, stream, consumer and KV names."""
SCHEMES = ("nats", "tls", "ws", "wss")
"""URL schemes the client accepts."""
ENV_BROKER = "WLOADCTL_BROKER"
"""Environment variable read when --broker is not given."""
ENV_PASSWORD = "WLOADCTL_BROKER_PASSWORD"
"""Environment variable read when --broker-password is not given (keeps it out of `ps`)."""
ENV_TIMEOUT = "WLOADCTL_BROKER_TIMEOUT"
"""Environment variable read when --broker-timeout is not given."""
ENV_PREFIX = "WLOADCTL_PREFIX"
"""Environment variable read when --prefix is not given."""
DEFAULT_PREFIX = "wl"
"""Subject prefix when --prefix is not given."""
RESULTS_MAX_AGE = 7 * 24 * 3600.0
"""Seconds a result batch is kept in the results stream (a week: longer than any run's outage)."""
MAX_REPLICAS = 5
"""Most copies of a stream JetStream keeps."""
DUPLICATE_WINDOW = 600.0
"""Seconds the streams remember message ids, so a publish retried after a reconnect is stored once."""
CONNECT_TIMEOUT = 5.0
"""Seconds a process waits for a broker that does not answer before it refuses (--broker-timeout)."""


def check_name(value: str, what: str) -> str:
    """Return `value` if it is a valid prefix/pool/agent/run name.

    Raises:
        UsageError: If it is empty, too long or has characters outside [A-Za-z0-9_-].
    """
    if not NAME_RE.fullmatch(value):
        raise UsageError(
            f"{what} {value!r} is not a valid name",
            hint="use 1 to 64 of the characters A-Z a-z 0-9 _ -",
        )
    return value


def _timeout_problem(value: float) -> str | None:
    """What is wrong with a connect timeout (None: nothing)."""
    return None if value > 0 and math.isfinite(value) else "give a number of seconds above 0"


def timeout_arg(text: str) -> float:
    """`--broker-timeout`: a finite number of seconds above 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    problem = _timeout_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return value


def _env_timeout(env: dict[str, str]) -> float | None:
    text = env.get(ENV_TIMEOUT)
    if not text:
        return None
    try:
        return timeout_arg(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{ENV_TIMEOUT}={exc}") from None


def check_broker_url(url: str) -> list[str]:
    """The server URLs of a `--broker` value (comma-separated).

    Raises:
        UsageError: none is given, or one cannot be read as a URL or is not a NATS URL (named without
            its password).
    """
    servers = [u.strip() for u in url.split(",") if u.strip()]
    if not servers:
        raise UsageError("empty broker URL", hint="e.g. nats://HOST:4222")
    for s in servers:
        try:
            parts = split_url(s)
        except ValueError as exc:
            raise UsageError(f"broker URL {without_password(s)!r}: {exc}", hint="e.g. nats://HOST:4222") from None
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise UsageError(
                f"broker URL {without_password(s)!r} is not a NATS URL",
                hint=f"use SCHEME://HOST[:PORT] with SCHEME one of {', '.join(SCHEMES)}",
            )
    return servers


def _readable(path: str | None, option: str) -> str | None:
    if path is None:
        return None
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot read it ({exc.strerror})") from None
    return path


@dataclass(frozen=True, slots=True)
class BrokerOptions:
    """How to reach the broker and which installation (prefix) to use on it."""

    url: str
    """One URL, or several comma-separated (the servers of a cluster)."""
    user: str | None = None
    """User name, with `password`."""
    password: str | None = None
    """Password of `user`."""
    token: str | None = None
    """Authentication token."""
    nkey_seed_file: str | None = None
    """File holding an nkey seed."""
    creds_file: str | None = None
    """Credentials file (JWT and nkey seed)."""
    tls_ca: str | None = None
    """CA bundle that signs the server's certificate."""
    tls_cert: str | None = None
    """Client certificate, for mutual TLS."""
    tls_key: str | None = None
    """Key of `tls_cert`."""
    prefix: str = DEFAULT_PREFIX
    """Subject prefix of this installation."""
    stream_replicas: int = 1
    """Copies of each stream and bucket this process creates where missing (3 on a three-node cluster)."""
    connect_timeout: float = CONNECT_TIMEOUT
    """Seconds to wait for a broker that does not answer before giving up (a refusal of the credentials is
    said at once)."""

    def __post_init__(self) -> None:
        check_broker_url(self.url)
        problem = _timeout_problem(self.connect_timeout)
        if problem:
            raise UsageError(f"--broker-timeout {self.connect_timeout:g}: {problem}")
        check_name(self.prefix, "--prefix")
        if not 1 <= self.stream_replicas <= MAX_REPLICAS:
            raise UsageError(f"--stream-replicas must be 1 to {MAX_REPLICAS}, not {self.stream_replicas}",
                             hint="3 on a three-node JetStream cluster, 1 on a single server")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise UsageError("--broker-tls-cert and --broker-tls-key go together")
        for path, option in (
            (self.nkey_seed_file, "--broker-nkey"),
            (self.creds_file, "--broker-creds"),
            (self.tls_ca, "--broker-tls-ca"),
            (self.tls_cert, "--broker-tls-cert"),
            (self.tls_key, "--broker-tls-key"),
        ):
            _readable(path, option)

    @property
    def servers(self) -> list[str]:
        """The server URLs."""
        return check_broker_url(self.url)

    @property
    def uses_tls(self) -> bool:
        """Whether a TLS context is to be made (TLS files given, or a tls:// or wss:// URL)."""
        return bool(self.tls_ca or self.tls_cert) or any(s.startswith(("tls:", "wss:")) for s in self.servers)

    @classmethod
    def from_args(cls, ns: argparse.Namespace, env: dict[str, str] | None = None) -> BrokerOptions:
        """Build from the options of `add_broker_args`, with environment fallbacks.

        Raises:
            UsageError: If no broker is given, or a URL, name or file is bad.
        """
        env = dict(os.environ) if env is None else env
        url = ns.broker or env.get(ENV_BROKER)
        if not url:
            raise UsageError("no broker given", hint=f"pass --broker nats://HOST:4222 or set {ENV_BROKER}")
        default: float = getattr(ns, "broker_timeout_default", CONNECT_TIMEOUT)
        timeout: float = getattr(ns, "broker_timeout", None) or _env_timeout(env) or default
        return cls(
            url=url,
            user=ns.broker_user,
            password=ns.broker_password or env.get(ENV_PASSWORD),
            token=ns.broker_token,
            nkey_seed_file=ns.broker_nkey,
            creds_file=ns.broker_creds,
            tls_ca=ns.broker_tls_ca,
            tls_cert=ns.broker_tls_cert,
            tls_key=ns.broker_tls_key,
            prefix=ns.prefix or env.get(ENV_PREFIX) or DEFAULT_PREFIX,
            stream_replicas=getattr(ns, "stream_replicas", 1),
            connect_timeout=timeout,
        )

    def shown(self) -> str:
        """The URL(s) without any password, for messages."""
        return ",".join(
            s if "@" not in s else s.split("://", 1)[0] + "://" + s.rsplit("@", 1)[1] for s in self.servers
        )


def add_broker_args(parser: argparse.ArgumentParser, *, streams: bool = True,
                    timeout: float = CONNECT_TIMEOUT) -> None:
    """Add the options of BrokerOptions to a parser (read back by BrokerOptions.from_args).

    Args:
        parser: The command's parser.
        streams: Also `--stream-replicas`, for the commands that create the streams where
            missing (agent, run, resume, scheduler, console).
        timeout: The command's default `--broker-timeout` (a quick look such as `agents` waits less).
    """
    g = parser.add_argument_group("broker")
    g.add_argument("--broker", metavar="URL", help=f"NATS URL(s), comma-separated (default: ${ENV_BROKER})")
    g.add_argument("--broker-timeout", type=timeout_arg, metavar="S",
                   help=f"seconds to wait for a broker that does not answer before giving up (default: ${ENV_TIMEOUT}, "
                   f"or {timeout:g}; a broker that refuses the credentials is said at once)")
    parser.set_defaults(broker_timeout_default=timeout)
    g.add_argument("--broker-user", metavar="USER")
    g.add_argument("--broker-password", metavar="PASSWORD", help=f"(default: ${ENV_PASSWORD})")
    g.add_argument("--broker-token", metavar="TOKEN")
    g.add_argument("--broker-nkey", metavar="FILE", help="nkey seed file")
    g.add_argument("--broker-creds", metavar="FILE", help="credentials file (JWT + nkey)")
    g.add_argument("--broker-tls-ca", metavar="FILE")
    g.add_argument("--broker-tls-cert", metavar="FILE")
    g.add_argument("--broker-tls-key", metavar="FILE")
    g.add_argument("--prefix", help=f"subject prefix of this installation (default: ${ENV_PREFIX}, or wl)")
    if streams:
        g.add_argument("--stream-replicas", type=int, default=1, metavar="N",
                       help="copies of each stream and bucket created where missing: 3 on a three-node "
                       "JetStream cluster (default 1; existing streams keep theirs)")


class Subjects:
    """Every subject, stream, consumer and bucket name of one installation, made in one place."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        """Names under `prefix`.

        Args:
            prefix: The installation's prefix.

        Raises:
            UsageError: If the prefix is not a valid name.
        """
        self.prefix = check_name(prefix, "prefix")
        """The installation's prefix."""
        p = self.prefix
        self.dispatch_all = f"{p}.dispatch.>"
        """Every dispatch subject (the dispatch stream's subjects)."""
        self.results_all = f"{p}.results.>"
        """Every results subject (the results stream's subjects)."""
        self.hb_all = f"{p}.hb.*"
        """Every agent's heartbeat."""
        self.beat_all = f"{p}.beat.*"
        """Every run's scheduler beat."""
        self.ask = f"{p}.ask"
        """Request/reply to every agent at once."""
        self.dispatch_stream = f"{p}-dispatch"
        """Work-queue stream of dispatch batches."""
        self.results_stream = f"{p}-results"
        """Stream of result batches."""
        self.leader_bucket = f"{p}-leader"
        """KV bucket of the current epoch and holder."""
        self.agents_bucket = f"{p}-agents"
        """KV bucket of each agent's last heartbeat."""

    def dispatch_pool(self, pool: str) -> str:
        """Subject of dispatches any agent of `pool` may take."""
        return f"{self.prefix}.dispatch.pool.{check_name(pool, 'pool')}"

    def dispatch_agent(self, name: str) -> str:
        """Subject of dispatches pinned to agent `name`."""
        return f"{self.prefix}.dispatch.agent.{check_name(name, 'agent')}"

    def results(self, run: str) -> str:
        """Subject of result batches of run `run`."""
        return f"{self.prefix}.results.{check_name(run, 'run id')}"

    def hb(self, name: str) -> str:
        """Heartbeat subject of agent `name`."""
        return f"{self.prefix}.hb.{check_name(name, 'agent')}"

    def beat(self, run: str) -> str:
        """Subject of the beats of run `run`'s active scheduler."""
        return f"{self.prefix}.beat.{check_name(run, 'run id')}"

    def pair(self, run: str) -> str:
        """Subject of the notices of run `run`'s active/standby pair (standby beats, takeover, stand-down)."""
        return f"{self.prefix}.pair.{check_name(run, 'run id')}"

    def op(self, run: str) -> str:
        """Request/reply subject of operator verbs for run `run` (the scheduler holding its lease answers)."""
        return f"{self.prefix}.op.{check_name(run, 'run id')}"

    def op_user(self, run: str, user: str) -> str:
        """Operator subject of run `run` for broker user `user` (the broker lets only that user publish on it)."""
        return f"{self.op(run)}.{check_name(user, 'broker user')}"

    def op_users(self, run: str) -> str:
        """Every broker user's operator subject of run `run` (the scheduler's subscription)."""
        return f"{self.op(run)}.*"

    def ctl(self, name: str) -> str:
        """Request/reply subject of agent `name`."""
        return f"{self.prefix}.ctl.{check_name(name, 'agent')}"

    def pool_consumer(self, pool: str) -> str:
        """Durable consumer shared by the agents of `pool` (work queues need one per subject)."""
        return f"pool-{check_name(pool, 'pool')}"

    def agent_consumer(self, name: str) -> str:
        """Durable consumer of agent `name`'s pinned dispatches."""
        return f"agent-{check_name(name, 'agent')}"

    def results_consumer(self, scheduler: str) -> str:
        """Durable consumer of one scheduler's reading of the results stream."""
        return f"sched-{check_name(scheduler, 'scheduler id')}"


def ensure_streams(
    link: BrokerLink,
    subjects: Subjects,
    *,
    replicas: int | None = None,
    results_max_age: float = RESULTS_MAX_AGE,
    timeout: float = 10.0,
) -> None:
    """Create the streams and KV buckets of an installation where missing (file storage).

    Idempotent: what exists is left as it is, and two processes racing to create the
    same thing both succeed (the server accepts an identical create, and a losing racer
    finds the winner's stream).

    Args:
        link: An open link.
        subjects: The installation's names.
        replicas: Copies of each stream (1 on one server; 3 on a three-node cluster); None:
            the link's `--stream-replicas`.
        results_max_age: Seconds result batches are kept.
        timeout: Seconds to wait for the broker.

    Raises:
        UsageError: If replicas is below 1.
        TransportError: If the broker refuses or does not answer.
    """
    if replicas is None:
        replicas = link.options.stream_replicas
    if replicas < 1:
        raise UsageError(f"stream replicas must be at least 1, not {replicas}")
    from nats.js import api

    file = api.StorageType.FILE
    link.ensure_stream(
        api.StreamConfig(
            name=subjects.dispatch_stream,
            subjects=[subjects.dispatch_all],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=file,
            num_replicas=replicas,
            duplicate_window=DUPLICATE_WINDOW,
        ),
        timeout=timeout,
    )
    link.ensure_stream(
        api.StreamConfig(
            name=subjects.results_stream,
            subjects=[subjects.results_all],
            retention=api.RetentionPolicy.LIMITS,
            storage=file,
            num_replicas=replicas,
            max_age=results_max_age,
            duplicate_window=DUPLICATE_WINDOW,
        ),
        timeout=timeout,
    )
    for bucket in (subjects.leader_bucket, subjects.agents_bucket):
        link.kv.ensure(bucket, replicas=replicas, timeout=timeout)

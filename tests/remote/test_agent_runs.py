"""Runs with jobs on agents: real nats-server, real agents on their own "hosts" (namespaces), real scheduler."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import ENV, cli, executor_pids, job_states, read_evidence, wait_for
from tests.remote.conftest import NatsServer, _alive
from tests.remote.ghost import Ghost
from tests.remote.nodes import Node
from wloadctl.client import RunClient
from wloadctl.procs.jobtree import detect, run_group
from wloadctl.remote.broker import BrokerOptions, Subjects
from wloadctl.remote.link import BrokerLink

pytestmark = pytest.mark.ipc


TRUSTING = {"roles": {"operator": {"broker_users": ["unauthenticated"]}}}
"""Plan keys making callers through a broker without authentication operators (the test brokers have none)."""


def plan_file(path: Path, out: Path, jobs: dict[str, dict], name: str = "remote",
              extra: dict | None = None) -> Path:
    """A plan whose jobs append `<job> start|end <time> <agent>` lines to `out` (`extra`: more top-level keys).

    A job's `gate` (a path) makes it wait, once started, until that file exists.
    """
    spec: dict = {"name": name, **(extra or {}), "jobs": {}}
    for jid, keys in jobs.items():
        keys = dict(keys)
        nap = keys.pop("sleep", 0.2)
        gate = keys.pop("gate", None)
        wait = f"while [ ! -e {gate} ]; do sleep 0.05; done; " if gate else ""
        cmd = (f'echo "{jid} start $(date +%s.%N) ${{WLOADCTL_AGENT:-local}}" >> {out}; {wait}sleep {nap}; '
               f'echo "{jid} end $(date +%s.%N) ${{WLOADCTL_AGENT:-local}}" >> {out}')
        spec["jobs"][jid] = {"command": keys.pop("command", cmd), **keys}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def agents_of(out: Path) -> dict[str, list[tuple[str, str]]]:
    """job -> [(start|end, agent), ...]."""
    got: dict[str, list[tuple[str, str]]] = {}
    for line in out.read_text().splitlines() if out.exists() else []:
        parts = line.split()
        got.setdefault(parts[0], []).append((parts[1], parts[3]))
    return got


def ran_once_on(proc: subprocess.Popen[str], out: Path, agent: str) -> None:
    """The run ends succeeded, its one job `only` run once, on `agent`."""
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["jobs"] == {"only": "SUCCEEDED"}
    assert agents_of(out)["only"] == [("start", agent), ("end", agent)]


def ran_once_on_a_new_agent(proc: subprocess.Popen[str], out: Path, tmp_path: Path, url: str) -> None:
    """An agent `real` joins pool etl: the run ends succeeded, its one job `only` run once, on it."""
    node = Node("real", url, tmp_path / "real", ["etl"]).start()
    try:
        ran_once_on(proc, out, "real")
    finally:
        node.stop()


RUNS: list[subprocess.Popen[str]] = []


def run_bg(plan: Path, sd: Path, url: str, *extra: str) -> subprocess.Popen[str]:
    """`wloadctl run` in the background; killed at the test's end if it is still running."""
    p = subprocess.Popen([sys.executable, "-m", "wloadctl", "run", str(plan), "--state-dir", str(sd),
                          "--broker", url, "--json", "--executors", "1", "--slots", "2", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    RUNS.append(p)
    return p


@pytest.fixture(autouse=True)
def no_run_left() -> Iterator[None]:
    """A run a failed test left behind is stopped (SIGTERM: it stops its executors and removes its objects)."""
    yield
    while RUNS:
        p = RUNS.pop()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
        else:
            p.communicate()


def test_pools_and_pins_are_honoured_and_results_logs_and_environment_cross_hosts(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    # Given a plan mixing local jobs, a pool of two agents, a job pinned to n2 and a condition on a remote result
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {
        "first": {},
        # more pool jobs than one agent takes (4 slots, and as many again ahead): both must work
        **{f"e{k}": {"pool": "etl", "depends_on": ["first"], "sleep": 1} for k in range(10)},
        "pinned": {"agent": "n2", "depends_on": ["e0"]},
        "decide": {"pool": "etl", "command": "echo \"pool=$WLOADCTL_POOL\"; echo '{\"go\": 1}' > "
                   "\"$WLOADCTL_RESULT_FILE\""},
        "yes": {"depends_on": ["decide"], "if": 'jobs["decide"].result.go == 1'},
        "no": {"depends_on": ["decide"], "if": 'jobs["decide"].result.go == 2'},
        "last": {"depends_on": ["pinned", "e9", "yes", "no"]},
    })
    sd = tmp_path / "sd"
    # When it runs with the broker
    p = cli("run", str(plan), "--state-dir", str(sd), "--broker", nats_server.url, "--json", timeout=120)
    # Then every job succeeded (the untaken branch skipped), each where the plan said
    assert p.returncode == 0, p.stderr
    jobs = json.loads(p.stdout)["jobs"]
    assert jobs["yes"] == "SUCCEEDED" and jobs["no"] == "SKIPPED", jobs
    where = agents_of(out)
    assert where["first"] == [("start", "local"), ("end", "local")]
    assert {where[f"e{k}"][0][1] for k in range(10)} == {"n1", "n2"}, "the pool's work spreads over its agents"
    assert [a for _k, a in where["pinned"]] == ["n2", "n2"]
    assert all(len(v) == 2 for v in where.values()), "every job ran once"
    # and a job's output is read from the host that ran it
    logs = cli("logs", "decide", "--state-dir", str(sd))
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.strip() == "pool=etl"


def test_a_pool_without_agents_waits_and_says_so(tmp_path: Path, nats_server: NatsServer) -> None:
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {"far": {"pool": "nobody"}, "here": {}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url)
    try:
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("here") == "SUCCEEDED", timeout=30,
                 what="the local job done")
        why = cli("why", "far", "--state-dir", str(sd), "--json")
        assert why.returncode == 0, why.stderr
        text = " ".join(json.loads(why.stdout)["reasons"])
        assert "pool nobody" in text and "no live agent" in text, text
        assert job_states(sd)["far"] == "READY"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def test_a_resume_without_the_broker_of_its_run_says_which_it_was_started_with(
        tmp_path: Path, nats_server: NatsServer) -> None:
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "ev", {"far": {"pool": "nobody"}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url, "--prefix", "other")
    try:
        wait_for(lambda: (sd / "journal.db").exists() and job_states(sd).get("far") == "READY", timeout=30,
                 what="the pool job waiting")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    # The hint printed at the stop names the state directory alone
    p = cli("resume", "--state-dir", str(sd))
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.rstrip().endswith(f"(the run was started with --broker {nats_server.url} --prefix other: give it "
                                      "to the resume too (with its credentials, if any))"), p.stderr


def test_a_plan_with_agent_jobs_and_no_broker_is_refused_in_one_line(tmp_path: Path) -> None:
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "ev", {"far": {"pool": "etl"}})
    p = cli("run", str(plan), "--state-dir", str(tmp_path / "sd"))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "far" in p.stderr and "--broker" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_kill_9_of_an_agent_host_mid_job_retries_its_jobs_elsewhere_and_nothing_done_twice(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    # Given a run whose pool jobs are running on both agents
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {
        **{f"a{k}": {"pool": "etl", "sleep": 0.1} for k in range(4)},
        **{f"b{k}": {"pool": "etl", "sleep": 4, "depends_on": [f"a{k}"]} for k in range(4)},
    })
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "3")
    wait_for(lambda: sum(1 for j, v in agents_of(out).items() if j.startswith("b") and v and v[0][1] == "n1"
                         and v[-1][0] == "start"
                         and len(v) == 1) >= 1, timeout=60, what="a long job running on n1")
    # (what the scheduler knows as done: a job that ended on n1 in the moment before the kill, its report not
    # yet out, is lost with the host and runs again, as an idempotent job may)
    done_before = {j for j, s in job_states(sd).items() if s == "SUCCEEDED"}
    assert done_before, "some job had ended and been reported before the kill"
    # When the whole of n1 dies (agent, executors and jobs)
    nodes["n1"].kill_node()
    stdout, stderr = proc.communicate(timeout=120)
    # Then the run finishes: what was cut short on n1 ran again on n2, and nothing known as ended ran again
    assert proc.returncode == 0, stderr
    assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
    ev = agents_of(out)
    for job, lines in ev.items():
        ends = [a for k, a in lines if k == "end"]
        assert ends and ends[-1] == lines[-1][1], f"{job} did not end last where it ran last: {lines}"
        assert len([a for k, a in lines if k == "end" and a == "n2"]) <= 1, f"{job} ended twice on n2: {lines}"
        if job in done_before:
            assert len(lines) == 2, f"{job} had ended before the kill and ran again: {lines}"
    cut = [j for j, lines in ev.items() if len(lines) == 3]
    assert cut, "some job was running on n1 when it died"
    assert all(lines[0] == ("start", "n1") and lines[-1] == ("end", "n2") for j, lines in ev.items() if j in cut)
    # and the run said so on the operator's terminal, as it does of a local executor lost
    assert "wloadctl: agent n1 silent for " in stderr and ": LOST, " in stderr, stderr
    assert "job(s) were on it: they run again, or are held when they may not run twice" in stderr, stderr


def test_broker_stopped_and_started_mid_run_loses_nothing(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {
        **{f"a{k}": {"pool": "etl", "sleep": 2} for k in range(4)},
        **{f"b{k}": {"pool": "etl", "depends_on": [f"a{k}"]} for k in range(4)},
    })
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "30")
    wait_for(lambda: len(agents_of(out)) >= 2, timeout=60, what="jobs started")
    # When the broker goes away while jobs run, and comes back
    nats_server.stop()
    # (status showed the run live and its agents ALIVE, their beats minutes old: only the run's terminal said it)
    wait_for(lambda: "BROKER LOST: " in cli("status", "--state-dir", str(sd)).stdout, timeout=15,
             what="status to say the broker is lost")
    lost = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["broker_lost"]
    assert lost["broker"] == nats_server.url and time.time() - 15 < lost["since"] <= time.time()
    time.sleep(1)
    nats_server.start()
    stdout, stderr = proc.communicate(timeout=120)
    # Then the run finishes and every job ran exactly once
    assert proc.returncode == 0, stderr
    assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
    ev = agents_of(out)
    assert sorted(ev) == sorted([f"a{k}" for k in range(4)] + [f"b{k}" for k in range(4)])
    assert all([k for k, _a in lines] == ["start", "end"] for lines in ev.values()), ev


def test_a_broker_outage_longer_than_the_agent_timeout_loses_no_agent_and_runs_nothing_twice(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    # Given a run whose non-idempotent job is running on an agent, with a short agent timeout
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {"pay": {"pool": "etl", "sleep": 2, "idempotent": False},
                                                 "redo": {"pool": "etl", "sleep": 2},
                                                 "after": {"pool": "etl", "depends_on": ["pay", "redo"]}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "3")
    wait_for(lambda: {"pay", "redo"} <= set(agents_of(out)), timeout=60, what="pay and redo started")
    # When the broker is away for twice the agent timeout while they end
    nats_server.stop()
    time.sleep(6)
    nats_server.start()
    stdout, stderr = proc.communicate(timeout=120)
    # Then no agent was lost: the jobs' results are taken, each job ran once, and both sides said so
    assert proc.returncode == 0, stderr
    assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
    assert all([k for k, _a in lines] == ["start", "end"] for lines in agents_of(out).values()), agents_of(out)
    assert "agent_lost" not in (sd / "events.jsonl").read_text()
    lines = stderr.splitlines()
    assert len([x for x in lines if "broker lost" in x]) == 1, stderr
    assert len([x for x in lines if "broker back" in x]) == 1, stderr
    for node in nodes.values():
        wait_for(lambda node=node: "broker back" in node.output(), timeout=30, what=f"{node.name} said so")
        assert "broker lost" in node.output()


def test_agents_and_a_run_of_another_prefix_say_where_the_agents_are(tmp_path: Path, nats_server: NatsServer) -> None:
    """An agent started with another --prefix than the run's never meets it: the jobs waited, nothing said why."""
    node = Node("nb", nats_server.url, tmp_path / "nb", ["etl"], extra=("--prefix", "bank")).start()
    try:
        wait_for(lambda: "nb" in cli("agents", "--broker", nats_server.url, "--prefix", "bank").stdout, timeout=30,
                 what="the agent beating under prefix bank")
        # When the agents of the default prefix are listed
        p = cli("agents", "--broker", nats_server.url)
        # Then none is, and the one under another prefix is named
        assert p.returncode == 0 and p.stdout.splitlines()[1] == (
            "live agents beat under prefix 'bank': nb (give --prefix to list them; a run and its agents share one "
            "prefix)"), p.stdout
        # And a run of the default prefix whose job needs pool etl says so on its own
        out = tmp_path / "evidence"
        plan = plan_file(tmp_path / "p.yaml", out, {"a": {"pool": "etl"}})
        proc = run_bg(plan, tmp_path / "sd", nats_server.url)
        wait_for(lambda: "agents_elsewhere" in (tmp_path / "sd" / "events.jsonl").read_text()
                 if (tmp_path / "sd" / "events.jsonl").exists() else False, timeout=30, what="the run to look")
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=60)
        assert ("wloadctl: no live agent serves pool:etl under prefix 'wl', but agents beat under prefix 'bank': nb: "
                "a run and its agents share one --prefix (its jobs wait)") in stderr.splitlines(), stderr
        assert "a" not in agents_of(out)
    finally:
        node.stop()


def test_a_kill_asked_for_while_the_broker_is_away_reaches_the_agent_once_it_is_back(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    # Given a job running on an agent, long enough to outlast the outage
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {"long": {"pool": "etl", "sleep": 60},
                                                 "after": {"pool": "etl", "depends_on": ["long"]}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "30")
    wait_for(lambda: job_states(sd).get("long") == "RUNNING", timeout=60, what="long heard running")
    # When the broker goes away, and an operator kills the job meanwhile
    nats_server.stop()
    wait_for(lambda: "BROKER LOST: " in cli("status", "--state-dir", str(sd)).stdout, timeout=15,
             what="status to say the broker is lost")
    why = cli("why", "long", "--state-dir", str(sd)).stdout
    assert "does not answer since" in why and "goes through once it is back" in why, why
    p = cli("kill", "long", "--state-dir", str(sd))
    assert p.returncode == 0, p.stderr
    time.sleep(1)
    nats_server.start()
    # Then the kill is sent once the broker is back (it was dropped: the job ran its 60 s and succeeded)
    stdout, stderr = proc.communicate(timeout=50)
    assert proc.returncode != 0 and "1 kill(s) asked for while it was away sent now" in stderr, stderr
    assert json.loads(stdout)["jobs"] == {"long": "FAILED", "after": "UPSTREAM_FAILED"}, stdout
    assert [k for k, _a in agents_of(out)["long"]] == ["start"]


def test_a_paused_agent_is_declared_lost_its_job_runs_elsewhere_and_its_late_copy_is_stopped(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {"slow": {"pool": "etl", "sleep": 8},
                                                 "after": {"pool": "etl", "depends_on": ["slow"]}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "3")
    wait_for(lambda: "slow" in agents_of(out), timeout=60, what="slow started")
    # (and the scheduler heard so: an agent frozen before its start report left would have it lost before start)
    wait_for(lambda: job_states(sd).get("slow") == "RUNNING", timeout=60, what="slow heard running")
    first = agents_of(out)["slow"][0][1]
    paused = nodes[first]
    # When that agent is frozen past the agent timeout
    paused.signal_agent(signal.SIGSTOP)
    try:
        # Then, while it is only silent, why says so of the job it runs
        def said() -> bool:
            with RunClient(sd) as c:
                return any(f"agent {first} is SUSPECT: not heard for" in r for r in c.why("slow")["reasons"])

        wait_for(said, timeout=30, every=0.05, what="why naming the silent agent")
        wait_for(lambda: len(agents_of(out).get("slow", [])) >= 2, timeout=60, what="slow started again elsewhere")
    finally:
        paused.signal_agent(signal.SIGCONT)
    # Then, once it wakes, its stale copy of the job is killed (it never ends there), and the run finishes
    _out, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    lines = agents_of(out)["slow"]
    assert [x for x in lines if x[0] == "end"] == [("end", lines[1][1])]
    assert lines[1][1] != first
    evidence = read_evidence(out)
    assert len(evidence["after"]) == 2
    # and its history names the agent that was lost, not an executor number
    told = cli("history", "slow", "--state-dir", str(sd)).stdout
    assert f"RUNNING -> READY  agent {first} lost during attempt 1" in told, told
    assert "executor" not in told, told


def test_a_job_held_when_its_agent_was_lost_takes_its_end_when_the_agent_comes_back(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    """A job that may not run twice is held when its agent is lost; the agent, back, was not lost at all for the
    job: it went on, and its success is the job's (held for nothing, it would keep the run waiting)."""
    out = tmp_path / "evidence"
    gate = tmp_path / "go"
    plan = plan_file(tmp_path / "p.yaml", out, {"pay": {"pool": "etl", "sleep": 0, "gate": gate, "idempotent": False},
                                                 "after": {"pool": "etl", "depends_on": ["pay"]}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "2")
    wait_for(lambda: "pay" in agents_of(out), timeout=60, what="pay started")
    # (and the scheduler heard so: an agent frozen before its start report left would have it lost before start)
    wait_for(lambda: job_states(sd).get("pay") == "RUNNING", timeout=60, what="pay heard running")
    first = agents_of(out)["pay"][0][1]
    paused = nodes[first]
    paused.signal_agent(signal.SIGSTOP)
    try:
        # (the job goes on while its agent is frozen: it ends before it is held)
        gate.touch()
        wait_for(lambda: len(agents_of(out)["pay"]) == 2, timeout=60, what="pay ended on the frozen agent")
        wait_for(lambda: job_states(sd).get("pay") == "HELD", timeout=60, what="pay held, its agent lost")
    finally:
        paused.signal_agent(signal.SIGCONT)
    _out, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert agents_of(out)["pay"] == [("start", first), ("end", first)], "it ran once, to its end"
    assert job_states(sd) == {"pay": "SUCCEEDED", "after": "SUCCEEDED"}
    told = cli("history", "pay", "--state-dir", str(sd)).stdout
    assert "HELD -> SUCCEEDED" in told and "its node came back: attempt 1 had succeeded" in told, told
    # and its success is stamped when it was heard, after it was held (not back-dated to when the job ended)
    steps = {(t["from"], t["to"]): t["ts"] for t in
             json.loads(cli("history", "pay", "--state-dir", str(sd), "--json").stdout)["transitions"]}
    assert steps[("HELD", "SUCCEEDED")] >= steps[("RUNNING", "HELD")], told


def _send_marking_task(link: BrokerLink, run: str, task: int, epoch: int, mark: Path, agent: str = "n1") -> None:
    """Dispatch to `agent` a task of `run` from a scheduler of `epoch` whose command appends a line to `mark`."""
    from wloadctl.ipc import protocol as P
    from wloadctl.remote import wire

    payload = P.encode_payload(P.Payload(job="j", command=f"echo x >> {mark}", log_path=""))
    record = P.TaskRecord(task, 1, P.TASK_SHELL, 0, epoch, 0, len(payload))
    link.js_publish(Subjects().dispatch_agent(agent), wire.encode_dispatch(epoch, run, run, [record], [payload]))


def test_an_agent_refuses_a_dispatch_or_kill_of_an_older_epoch(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    from tests.remote.conftest import collect
    from wloadctl.ipc import protocol as P
    from wloadctl.remote import messages as M
    from wloadctl.remote import wire

    subj = Subjects()
    link = BrokerLink.open(BrokerOptions(nats_server.url), name="old-scheduler")
    try:
        link.subscribe(subj.results("r1"))
        mark = tmp_path / "ran"
        # Given an agent that has seen epoch 5 of run r1
        _send_marking_task(link, "r1", 0, 5, mark)
        kinds: list[int] = []
        deadline = time.monotonic() + 20
        while P.RES_EXITED not in kinds and time.monotonic() < deadline:  # its reports, in one message or more
            kinds += [e.record.kind for m in collect(link, 1, timeout=1) for e in wire.decode_results(m.data).entries]
        wait_for(lambda: mark.exists(), timeout=20, what="the epoch-5 task ran")
        # When a scheduler of epoch 3 sends a task and a kill
        _send_marking_task(link, "r1", 1, 3, mark)
        got = collect(link, 1, timeout=20)
        rec = [e.record for m in got for e in wire.decode_results(m.data).entries]
        # Then the task is refused and said so, and it never runs
        assert [r.kind for r in rec] == [P.RES_REJECTED] and rec[0].epoch == 3
        time.sleep(0.5)
        assert mark.read_text() == "x\n"
        rep = link.request(subj.ctl("n1"), M.KillRequest("r1", 0, 1, signal.SIGKILL, 3).encode(), timeout=5)
        assert rep is not None and not M.Reply.decode(rep).ok and "older" in M.Reply.decode(rep).error
        assert P.RES_EXITED in kinds
    finally:
        link.close()


def test_an_agent_asked_its_inventory_by_a_recovering_scheduler_refuses_the_older_epochs_copies(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    from tests.remote.conftest import collect
    from wloadctl.ipc import protocol as P
    from wloadctl.remote import messages as M
    from wloadctl.remote import wire

    subj = Subjects()
    link = BrokerLink.open(BrokerOptions(nats_server.url), name="new-scheduler")
    try:
        link.subscribe(subj.results("r2"))
        # Given a scheduler of epoch 4 recovering run r2, which asks the agents what they hold
        replies = link.gather(subj.ask, M.InventoryRequest("r2", epoch=4).encode(), wait=2.0, max_replies=len(nodes))
        assert len(replies) == len(nodes) and all(M.Reply.decode(r).held == [] for r in replies)
        # When a copy its crashed predecessor of epoch 3 sent still waits in the stream
        mark = tmp_path / "ran"
        _send_marking_task(link, "r2", 0, 3, mark)
        # Then the agent refuses it, and it never runs
        rec = [e.record for m in collect(link, 1, timeout=20) for e in wire.decode_results(m.data).entries]
        assert [(r.kind, r.epoch) for r in rec] == [(P.RES_REJECTED, 3)]
        time.sleep(0.5)
        assert not mark.exists()
    finally:
        link.close()


def test_an_agent_restarted_on_its_node_reattaches_to_the_jobs_its_executors_still_run(
        tmp_path: Path, nats_server: NatsServer) -> None:
    # Given an agent (sharing this host's IPC) running a job
    node = Node("solo", nats_server.url, tmp_path / "solo", ["etl"], isolated=False).start()
    try:
        wait_for(lambda: _alive(nats_server.url, "solo"), timeout=30, what="the agent beating")
        out = tmp_path / "evidence"
        plan = plan_file(tmp_path / "p.yaml", out, {"long": {"agent": "solo", "sleep": 3},
                                                     "next": {"pool": "etl", "depends_on": ["long"]}})
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url)
        wait_for(lambda: "long" in agents_of(out), timeout=60, what="long started")
        # When the agent process alone is killed -9 (its executors and the job live on) and started again
        node.signal_agent(signal.SIGKILL)
        assert node.proc is not None
        node.proc.wait(10)
        node.start()
        stdout, stderr = proc.communicate(timeout=120)
        # Then the job it was running is reattached, not rerun, and its result reaches the run
        assert proc.returncode == 0, stderr
        assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
        assert [k for k, _a in agents_of(out)["long"]] == ["start", "end"]
        assert "reattached to 2 executor(s)" in node.output()
        # And once the agent is stopped, no job group of its node is left (cgroup mode: the suite runs as root)
        node.stop()
        how = detect()
        if how.base is not None:
            assert not run_group(how.base, "agent-solo").exists(), "a stopped agent removes its job groups"
    finally:
        node.stop()


def test_an_agent_restarted_while_idle_takes_back_its_executors_and_runs_jobs_once(
        tmp_path: Path, nats_server: NatsServer) -> None:
    # (holding no task, the restarted agent left its old executors running beside new ones on the same queues:
    # each was seen stuck and killed, over and over, and a job longer than that never finished)
    node = Node("idle", nats_server.url, tmp_path / "idle", ["etl"], isolated=False).start()
    try:
        wait_for(lambda: _alive(nats_server.url, "idle"), timeout=30, what="the agent beating")
        wait_for(lambda: len(executor_pids("agent-idle")) == 2, timeout=30, what="its two executors")
        old = set(executor_pids("agent-idle"))
        node.signal_agent(signal.SIGKILL)
        assert node.proc is not None
        node.proc.wait(10)
        node.start()
        wait_for(lambda: "reattached to 2 executor(s) still running, holding no task" in node.output(), timeout=30,
                 what="the restarted agent to take back its executors")
        assert set(executor_pids("agent-idle")) == old
        out = tmp_path / "evidence"
        plan = plan_file(tmp_path / "p.yaml", out, {f"j{k}": {"pool": "etl", "sleep": 1} for k in range(4)})
        proc = run_bg(plan, tmp_path / "sd", nats_server.url)
        _stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert all([k for k, _a in runs] == ["start", "end"] for runs in agents_of(out).values()), agents_of(out)
        assert "stuck" not in node.output() and set(executor_pids("agent-idle")) == old
    finally:
        node.stop()


def test_a_job_that_ended_before_its_whole_node_was_killed_is_reported_ended_not_run_again(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {"one": {"pool": "etl", "sleep": 1},
                                                 "next": {"pool": "etl", "depends_on": ["one"]}})
    proc = run_bg(plan, tmp_path / "sd", nats_server.url, "--agent-timeout", "60")
    wait_for(lambda: "one" in agents_of(out), timeout=60, what="one started")
    node = nodes[agents_of(out)["one"][0][1]]
    # Given an agent frozen while its job ends (its executor journals the exit; the agent never reads it)
    node.signal_agent(signal.SIGSTOP)
    wait_for(lambda: [k for k, _a in agents_of(out)["one"]] == ["start", "end"], timeout=30, what="one ended")
    time.sleep(0.5)
    assert list((node.state_dir / "executors").glob("*.results")), "the node's executors journal what they run"
    # When the whole node is killed -9 (agent, executors, shared memory) and started again
    node.kill_node()
    restarted = time.time()
    node.start()
    stdout, stderr = proc.communicate(timeout=120)
    # Then the job's end reaches the run from its executor's journal: it is not run a second time
    assert proc.returncode == 0, stderr
    assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
    assert [k for k, _a in agents_of(out)["one"]] == ["start", "end"]
    assert "1 task(s) held before a restart had ended meanwhile: reported ended" in node.output()
    # and the dead executors' journals, applied, are gone: what is journaled now is the new executors' alone
    # (in the node's fresh pid namespace they may have the same pids, and so the same file names)
    from wloadctl.procs.localpool import read_results

    recs = [r for p in (node.state_dir / "executors").glob("*.results") for r in read_results(p)]
    assert all(max(r.started, r.ended) >= restarted for r in recs), recs


def test_a_task_whose_payload_cannot_be_read_ends_as_a_failed_start_and_never_runs(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    from tests.remote.conftest import collect
    from wloadctl.ipc import protocol as P
    from wloadctl.remote import wire

    subj = Subjects()
    link = BrokerLink.open(BrokerOptions(nats_server.url), name="garbled")
    try:
        link.subscribe(subj.results("r2"))
        junk = b"\x00not a payload"
        task = P.TaskRecord(7, 1, P.TASK_SHELL, 0, 1, 0, len(junk))
        link.js_publish(subj.dispatch_agent("n2"), wire.encode_dispatch(1, "r2", "r2", [task], [junk]))
        got = collect(link, 1, timeout=20)
        entries = [e for m in got for e in wire.decode_results(m.data).entries]
        assert [(e.record.task, e.record.kind) for e in entries] == [(7, P.RES_EXITED)]
        rec = entries[0].record
        assert rec.flags & P.FLAG_SPAWN_FAILED and rec.exit_code == 127
        assert b"cannot read the task's payload" in entries[0].tail
    finally:
        link.close()


def test_tasks_a_lost_agent_took_and_never_reported_are_sent_again_exactly_once(
        tmp_path: Path, nats_server: NatsServer) -> None:
    out = tmp_path / "evidence"
    plan = plan_file(tmp_path / "p.yaml", out, {"only": {"pool": "etl", "sleep": 0.1}})
    with Ghost(nats_server.url, ["etl"]) as ghost:
        # Given a run whose pool has one agent, which takes the dispatch, acknowledges it and dies unreported
        ghost.beat()
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url, "--agent-timeout", "3")
        ghost.take("etl")
        # When it falls silent past the agent timeout, and a real agent joins the pool later
        wait_for(lambda: b"tasks_lost" in (sd / "events.jsonl").read_bytes(), timeout=30,
                 what="the ghost's task found lost")
        # Then the task runs once, on the real agent, and the run succeeds
        ran_once_on_a_new_agent(proc, out, tmp_path, nats_server.url)


def test_after_a_scheduler_crash_a_job_that_may_not_run_twice_taken_by_a_gone_agent_is_held_not_sent_again(
        tmp_path: Path, nats_server: NatsServer) -> None:
    from tests.remote.conftest import collect
    from wloadctl.ipc import protocol as P
    from wloadctl.remote import wire

    out = tmp_path / "evidence"
    once = {"sleep": 0, "idempotent": False}
    plan = plan_file(tmp_path / "p.yaml", out, {"pay": {"pool": "etl", **once}, "post": {"pool": "batch", **once}})
    ghost = Ghost(nats_server.url, ["etl", "batch"])
    subj, link = ghost.subj, ghost.link
    node: Node | None = None
    try:
        # Given a run whose agent takes `pay` (acknowledged: it is its own now) while `post` waits unread in the
        # broker, and whose scheduler is killed -9 then, the agent gone with it and never heard of again
        ghost.beat()
        sd = tmp_path / "sd"
        first = run_bg(plan, sd, nats_server.url, "--agent-timeout", "3")
        ghost.take("etl")
        wait_for(lambda: link.stream_messages(subj.dispatch_stream) == 1, timeout=30, what="post dispatched")
        assert job_states(sd) == {"pay": "QUEUED", "post": "QUEUED"}
        first.kill()
        first.communicate(timeout=30)
        # When the run is resumed, and an agent of both pools joins once it is under way
        again = subprocess.Popen([sys.executable, "-m", "wloadctl", "resume", "--state-dir", str(sd), "--broker",
                                  nats_server.url, "--json", "--executors", "1", "--agent-timeout", "3",
                                  "--exit-on-hold"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        RUNS.append(again)
        wait_for(lambda: (sd / "events.jsonl").read_bytes().count(b"scheduler_start") == 2, timeout=60,
                 what="the resume under way")
        # (post's old copy is read by an agent that heard the new epoch: refused, as the agents do, unrun)
        puller = link.pull(subj.dispatch_stream, subj.pool_consumer("batch"), subj.dispatch_pool("batch"), window=1)
        old = [m for m in collect(link, 1, timeout=10.0) if m.jetstream]
        batch = wire.decode_dispatch(old[0].data)
        refused = [wire.ResultEntry(P.ResultRecord(P.RES_REJECTED, 0, 0, t.task, t.attempt, 0, 0, t.epoch, 0,
                                                   time.time(), time.time(), 0, 0)) for t in batch.tasks]
        link.js_publish(subj.results(batch.run), wire.split_results("ghost", batch.run, refused)[0])
        old[0].ack()
        puller.stop()
        node = Node("real", nats_server.url, tmp_path / "real", ["etl", "batch"]).start()
        wait_for(lambda: job_states(sd).get("post") == "SUCCEEDED", timeout=60, what="post run")
        stdout, stderr = again.communicate(timeout=120)
        # Then post, whose dispatch was refused unread, runs once; pay, which may have started, waits for an operator
        assert again.returncode == 1 and json.loads(stdout)["jobs"] == {"pay": "HELD", "post": "SUCCEEDED"}, stderr
        assert agents_of(out) == {"post": [("start", "real"), ("end", "real")]}
        assert "2 queued job(s) that may not run twice" in stderr, stderr
    finally:
        ghost.close()
        if node is not None:
            node.stop()


def test_an_agent_stopped_while_its_job_runs_exits_clean_and_the_run_retries_the_job_elsewhere(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    """SIGTERM to an agent running a job: the job is stopped and reported lost, the agent exits 0 (it crashed
    on its book's lookup of the task it had just dropped), and the run runs the job on the pool's other agent."""
    out, gate = tmp_path / "evidence", tmp_path / "go"
    plan = plan_file(tmp_path / "p.yaml", out, {"slow": {"pool": "etl", "gate": str(gate), "sleep": 0}})
    proc = run_bg(plan, tmp_path / "sd", nats_server.url)
    wait_for(lambda: "slow" in agents_of(out), timeout=60, what="slow started on an agent")
    first = agents_of(out)["slow"][0][1]
    node = nodes[first]
    node.signal_agent(signal.SIGTERM)
    assert node.proc is not None and node.proc.wait(30) == 0, node.output()
    assert "internal error" not in node.output(), node.output()
    gate.touch()
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["jobs"] == {"slow": "SUCCEEDED"}
    other = ({"n1", "n2"} - {first}).pop()
    assert agents_of(out)["slow"] == [("start", first), ("start", other), ("end", other)]


def test_agents_are_named_in_why_a_pinned_job_sees_no_pool_and_a_stopped_agent_is_listed_stopped(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    # Given a job pinned to n2 with `agent:` alone, running
    gate = tmp_path / "go"
    plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {"pinned": {
        "agent": "n2", "command": f'echo "pool=${{WLOADCTL_POOL-unset}}"; while [ ! -e {gate} ]; do sleep 0.05; '
                                  "done"}})
    sd = tmp_path / "sd"
    proc = run_bg(plan, sd, nats_server.url)
    try:
        # When `why` is asked while it runs
        why = wait_for(lambda: (p := cli("why", "pinned", "--state-dir", str(sd))).returncode == 0 and
                       "running" in p.stdout and p.stdout, timeout=60, what="pinned running")
    finally:
        gate.touch()
    _out, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    # Then it names the agent that runs it; the job saw no pool
    assert "on agent n2" in why and "executor" not in why, why
    assert cli("logs", "pinned", "--state-dir", str(sd)).stdout == "pool=unset\n"
    # And an agent stopped cleanly is listed STOPPED, not LOST
    nodes["n2"].stop()
    listed = {a["agent"]: a["state"] for a in json.loads(cli("agents", "--broker", nats_server.url, "--json",
                                                            "--agent-timeout", "0.5", check=True).stdout)}
    assert listed["n2"] == "STOPPED", listed


def test_a_resume_reads_every_result_its_agents_stored_before_it_judges_any_job_lost(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    out = tmp_path / "evidence"
    # Given a run of hundreds of short jobs on two agents, chains twenty wide
    jobs = {f"j{k:03d}": {"pool": "etl", "sleep": 0.02, **({"depends_on": [f"j{k - 20:03d}"]} if k >= 20 else {})}
            for k in range(700)}
    plan = plan_file(tmp_path / "p.yaml", out, jobs)
    sd = tmp_path / "sd"
    first = run_bg(plan, sd, nats_server.url, "--agent-timeout", "30")
    # whose scheduler is killed -9 once most have run, the agents going on with what they hold
    wait_for(lambda: sum(k == "end" for v in agents_of(out).values() for k, _a in v) >= 450, timeout=120,
             what="most jobs run")
    first.kill()
    first.communicate(timeout=30)
    time.sleep(1.0)
    # When it is resumed: the stream holds every result the agents stored, hundreds of them
    again = subprocess.Popen([sys.executable, "-m", "wloadctl", "resume", "--state-dir", str(sd), "--broker",
                              nats_server.url, "--json", "--executors", "1", "--agent-timeout", "30"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    RUNS.append(again)
    stdout, stderr = again.communicate(timeout=180)
    # Then every job succeeded, and none ran twice: no job that had ended was judged lost
    assert again.returncode == 0, stderr
    assert set(json.loads(stdout)["jobs"].values()) == {"SUCCEEDED"}
    twice = {j: v for j, v in agents_of(out).items() if [k for k, _a in v] != ["start", "end"]}
    assert not twice, (twice, stderr)


def test_a_dispatch_delivered_again_after_its_task_ran_is_not_run_again(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    from tests.remote.conftest import collect
    from wloadctl.ipc import protocol as P
    from wloadctl.remote import wire

    said = "1 task(s) of run r9 delivered again after they ran here: not run again"
    link = BrokerLink.open(BrokerOptions(nats_server.url), name="scheduler")
    try:
        link.subscribe(Subjects().results("r9"))
        mark = tmp_path / "ran"
        # Given a task an agent ran to its end, and whose end it published
        _send_marking_task(link, "r9", 0, 1, mark)
        kinds: list[int] = []
        deadline = time.monotonic() + 20
        while P.RES_EXITED not in kinds and time.monotonic() < deadline:
            kinds += [e.record.kind for m in collect(link, 1, timeout=1) for e in wire.decode_results(m.data).entries]
        assert P.RES_EXITED in kinds and mark.read_text() == "x\n"
        # When its dispatch is delivered again (its acknowledgement lost with the agent's connection)
        _send_marking_task(link, "r9", 0, 1, mark)
        # Then the agent does not run it again, and says so
        wait_for(lambda: said in nodes["n1"].output(), timeout=20, what="the agent's line")
        assert mark.read_text() == "x\n"
        # and no more after a restart on its node: its journal remembers what ran there
        nodes["n1"].stop()
        nodes["n1"].start()
        wait_for(lambda: _alive(nats_server.url, "n1"), timeout=30, what="n1 beating again")
        _send_marking_task(link, "r9", 0, 1, mark)
        wait_for(lambda: nodes["n1"].output().count(said) == 2, timeout=20, what="the agent's line again")
        assert mark.read_text() == "x\n"
    finally:
        link.close()


def test_a_quick_job_on_an_agent_is_heard_started_before_its_end(tmp_path: Path, nats_server: NatsServer) -> None:
    """An agent reports a job that printed and ended at once in one batch with its start: the start is heard
    first, so its history shows the run and its start time is kept (not "never ran")."""
    node = Node("quick", nats_server.url, tmp_path / "quick", ["etl"]).start()
    try:
        wait_for(lambda: _alive(nats_server.url, "quick"), timeout=30, what="the agent beating")
        jobs = {f"q{k}": {"pool": "etl", "command": f"echo q{k}"} for k in range(4)}
        plan = plan_file(tmp_path / "p.yaml", tmp_path / "unused", jobs)
        sd = tmp_path / "sd"
        p = cli("run", str(plan), "--state-dir", str(sd), "--broker", nats_server.url, "--json", timeout=120)
        assert p.returncode == 0, p.stderr
        for job in jobs:
            history = cli("history", job, "--state-dir", str(sd)).stdout
            assert history.startswith(f"{job}: SUCCEEDED after 1 attempt(s)"), history
            assert "QUEUED -> RUNNING on agent quick" in history, history
        rows = json.loads(cli("status", "--state-dir", str(sd), "--json").stdout)["jobs"]
        assert all(r["started"] for r in rows), rows
    finally:
        node.stop()


def test_an_agent_of_another_release_leaves_its_dispatches_to_others_and_a_run_names_it(
        tmp_path: Path, nats_server: NatsServer) -> None:
    """Schedulers and agents of two releases share a broker during an upgrade: an agent that cannot read a
    dispatch gives it back (refused for good, its job would wait for ever), and a run says which agent beats in
    messages it cannot read, where before it ignored it without a word."""
    from tests.remote.conftest import collect
    from wloadctl.ipc import protocol as P
    from wloadctl.remote import messages as M
    from wloadctl.remote import wire

    subj = Subjects()
    node = Node("n1", nats_server.url, tmp_path / "n1", ["etl"]).start()
    link = BrokerLink.open(BrokerOptions(nats_server.url), name="other-release")
    try:
        wait_for(lambda: _alive(nats_server.url, "n1"), timeout=30, what="the agent beating")
        # Given a run whose job waits on n1, and an agent "old" of another release beating on the broker
        gate = tmp_path / "go"
        plan = plan_file(tmp_path / "p.yaml", tmp_path / "evidence", {"only": {"pool": "etl", "gate": gate}})
        sd = tmp_path / "sd"
        proc = run_bg(plan, sd, nats_server.url)
        beat = json.loads(M.Heartbeat("old", ["etl"], 0, 2, 0.0, 0, 0.0, 0, 0, 0, [], 0, 0.0, 1, "h", "0",
                                      time.time()).encode())
        beat["v"] = M.VERSION + 1

        def named() -> bool:
            link.publish(subj.hb("old"), json.dumps(beat).encode())
            return (sd / "events.jsonl").exists() and '"agent_foreign"' in (sd / "events.jsonl").read_text()

        # Then the run says so, once
        wait_for(named, timeout=30, every=0.3, what="the agent of another release named")
        gate.touch()
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        said = f"agent old (pools etl) beats in broker messages of version {M.VERSION + 1}"
        assert stderr.count(said) == 1, stderr
        # When a dispatch of that release comes to n1's pool
        task = P.TaskRecord(0, 1, P.TASK_NOOP, 0, 1, 0, 0)
        data = bytearray(wire.encode_dispatch(1, "r-old", "r-old", [task], [b""]))
        data[2] = wire.VERSION + 1  # (the header's version byte)
        link.js_publish(subj.dispatch_pool("etl"), bytes(data))
        # Then n1 says once that it leaves it to the agents of that release
        wait_for(lambda: "left to agents of the release that sent them" in node.output(), timeout=20,
                 what="n1's line")
        node.stop()
        assert node.output().count("left to agents of the release that sent them") == 1, node.output()
        # and an agent of that release still gets it
        link.pull(subj.dispatch_stream, subj.pool_consumer("etl"), subj.dispatch_pool("etl"), window=1,
                  source="old")
        got = collect(link, 1, timeout=10)
        assert [wire.foreign_version(m.data) for m in got] == [wire.VERSION + 1]
        got[0].term()
    finally:
        link.close()
        node.stop()


def test_a_job_judged_lost_by_a_resume_its_frozen_agent_did_not_answer_is_stopped_there_once_it_wakes(
        tmp_path: Path, nats_server: NatsServer, nodes: dict[str, Node]) -> None:
    """An agent that cannot answer a resume's inventory in time (frozen, swamped) has its running jobs judged lost
    and run again elsewhere; when it wakes, its copy must not run on beside the new one."""
    from tests.remote.test_agent_names import _runs

    out = tmp_path / "evidence"
    gate = tmp_path / "go"
    plan = plan_file(tmp_path / "p.yaml", out, {"slow": {"pool": "etl", "gate": gate}})
    sd = tmp_path / "sd"
    # Given a run whose job runs on an agent, and whose scheduler is killed -9
    first = run_bg(plan, sd, nats_server.url, "--agent-timeout", "30")
    wait_for(lambda: job_states(sd).get("slow") == "RUNNING", timeout=60, what="slow heard running")
    ran = nodes[agents_of(out)["slow"][0][1]]
    first.kill()
    first.communicate(timeout=30)
    # When that agent is frozen while the run is resumed, and wakes once the job started again elsewhere
    ran.signal_agent(signal.SIGSTOP)
    try:
        again = subprocess.Popen([sys.executable, "-m", "wloadctl", "resume", "--state-dir", str(sd), "--broker",
                                  nats_server.url, "--json", "--executors", "1", "--agent-timeout", "30"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        RUNS.append(again)
        wait_for(lambda: len(agents_of(out).get("slow", [])) >= 2, timeout=60, what="slow started again")
    finally:
        ran.signal_agent(signal.SIGCONT)
    # Then its copy there is stopped, and the job ends once, where it runs now
    wait_for(lambda: not _runs(ran, str(gate)), timeout=30, what="the woken agent's copy stopped")
    gate.touch()
    stdout, stderr = again.communicate(timeout=120)
    assert again.returncode == 0, stderr
    assert json.loads(stdout)["jobs"] == {"slow": "SUCCEEDED"}
    assert [k for k, _a in agents_of(out)["slow"]] == ["start", "start", "end"]

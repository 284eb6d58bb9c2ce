"""BrokerLink against a real nats-server: core messages, request/reply, pulls, KV, restarts, close."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.remote.conftest import NatsServer, broker_threads, collect
from wloadctl.errors import TransportError, UsageError
from wloadctl.remote.broker import BrokerOptions, Subjects, ensure_streams
from wloadctl.remote.link import BrokerLink

S = Subjects()


@pytest.fixture
def peer(nats_server: NatsServer) -> Iterator[BrokerLink]:
    """A second link to the same server (another process's view)."""
    lk = BrokerLink.open(BrokerOptions(nats_server.url), name="peer")
    yield lk
    lk.close()


def _serve(link: BrokerLink, count: int, answer: bytes) -> threading.Thread:
    """Answer `count` requests received by `link` in a thread, as a sync loop would."""

    def run() -> None:
        done = 0
        while done < count:
            for m in collect(link, 1, timeout=10.0):
                link.respond(m, answer + b":" + m.data)
                done += 1

    t = threading.Thread(target=run)
    t.start()
    return t


def test_published_messages_reach_a_subscriber_in_order_through_the_wake_descriptor(
    link: BrokerLink, peer: BrokerLink
) -> None:
    sid = link.subscribe("t.>", source="tests")
    assert link.flush()  # (the server has the subscription before the peer publishes)
    peer.publish("t.a", b"1")
    peer.publish("t.b", b"2")
    peer.publish("other", b"x")
    peer.publish("t.c", b"3")
    got = collect(link, 3)
    assert [(m.subject, m.data, m.source, m.jetstream) for m in got] == [
        ("t.a", b"1", "tests", False),
        ("t.b", b"2", "tests", False),
        ("t.c", b"3", "tests", False),
    ]
    link.unsubscribe(sid)
    with pytest.raises(TransportError, match="not from a stream"):
        got[0].ack()


def test_request_gets_the_reply_and_none_without_responders(link: BrokerLink, peer: BrokerLink) -> None:
    peer.subscribe(S.ctl("n1"))
    assert peer.flush()
    server = _serve(peer, 1, b"pong")
    assert link.request(S.ctl("n1"), b"ping", timeout=5.0) == b"pong:ping"
    server.join()
    assert link.request(S.ctl("nobody"), b"ping", timeout=1.0) is None


def test_gather_collects_a_reply_from_every_listener(nats_server: NatsServer, link: BrokerLink) -> None:
    agents = [BrokerLink.open(BrokerOptions(nats_server.url), name=f"a{i}") for i in range(2)]
    try:
        servers = []
        for i, a in enumerate(agents):
            a.subscribe(S.ask)
            assert a.flush()
            servers.append(_serve(a, 1, f"a{i}".encode()))
        replies = link.gather(S.ask, b"hear?", wait=5.0, max_replies=2)
        for t in servers:
            t.join()
        assert sorted(replies) == [b"a0:hear?", b"a1:hear?"]
    finally:
        for a in agents:
            a.close()


def test_a_standby_waits_for_every_agent_name_when_two_agents_answer_under_one(
        nats_server: NatsServer, link: BrokerLink, peer: BrokerLink) -> None:
    """Two agents sharing a name answer twice: the standby's ask (and its inventory after a takeover, which
    waits the same way) must not take the second answer for that of another agent still to answer."""
    import time

    from tests.remote.test_wire import _beat
    from wloadctl.remote import messages as M
    from wloadctl.remote.witness import AgentWitness

    # Given a standby that heard agents "twin" and "n2" beat
    witness = AgentWitness(link, S)
    assert link.flush()
    for name in ("twin", "n2"):
        peer.publish(S.hb(name), _beat(agent=name).encode())
    deadline = time.monotonic() + 10
    while witness.expected() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert witness.expected() == 2
    # and two agents answering as "twin" at once, and n2 a moment later
    agents = [BrokerLink.open(BrokerOptions(nats_server.url), name=f"a{i}") for i in range(3)]
    try:
        threads = []
        for a, name, delay in zip(agents, ("twin", "twin", "n2"), (0.0, 0.0, 0.3), strict=True):
            a.subscribe(S.ask)
            assert a.flush()

            def answer(a: BrokerLink = a, name: str = name, delay: float = delay) -> None:
                for m in collect(a, 1, timeout=10.0):
                    time.sleep(delay)
                    a.respond(m, M.Reply(name, True, heard_active=None).encode())

            threads.append(threading.Thread(target=answer))
            threads[-1].start()
        # When it asks whether they still hear the active scheduler
        verdict = witness.ask("r1", 1, timeout=1.5, wait=5.0)
        for t in threads:
            t.join()
        # Then n2's answer is among those it judges by
        assert sorted(set(verdict.asked)) == ["n2", "twin"], verdict
    finally:
        for a in agents:
            a.close()


def test_pulled_work_is_gone_once_acked_and_redelivered_when_not(link: BrokerLink) -> None:
    # Given two tasks on a pool's work queue
    for body in (b"t1", b"t2"):
        assert link.js_publish(S.dispatch_pool("etl"), body) is not None
    # When an agent pulls them and acks only the first
    link.pull(S.dispatch_stream, S.pool_consumer("etl"), S.dispatch_pool("etl"), window=4, ack_wait=1.0)
    first = collect(link, 2)
    assert sorted((m.data, m.delivered) for m in first) == [(b"t1", 1), (b"t2", 1)]
    next(m for m in first if m.data == b"t1").ack()
    # Then the second comes back after ack_wait, and once acked nothing is left
    again = collect(link, 1)
    assert [m.data for m in again] == [b"t2"]
    again[0].ack()
    assert collect(link, 1, timeout=2.5) == []
    assert link.stream_messages(S.dispatch_stream) == 0


def test_a_puller_holds_at_most_its_window_and_naks_and_terms_settle(link: BrokerLink) -> None:
    # Given three pinned tasks and a puller that may hold one at a time
    for i in range(3):
        link.js_publish(S.dispatch_agent("n1"), f"m{i}".encode())
    link.pull(S.dispatch_stream, S.agent_consumer("n1"), S.dispatch_agent("n1"), window=1, ack_wait=30.0)
    one = collect(link, 3, timeout=2.0)
    assert [m.data for m in one] == [b"m0"]
    # When the first is given back (nak), its second delivery refused for good (term), the rest acked
    one[0].nak()
    seen = [(b"m0", 1)]  # (body, how many times it came); Msg.delivered is not used, see its docstring
    while len(seen) < 4:
        got = collect(link, 1)
        assert len(got) == 1, f"only {seen} delivered"
        m = got[0]
        seen.append((m.data, len([d for d, _ in seen if d == m.data]) + 1))
        if m.data == b"m0":
            m.term()
        else:
            m.ack()
    # Then every task came once more only when given back, and nothing is left
    assert sorted(seen) == [(b"m0", 1), (b"m0", 2), (b"m1", 1), (b"m2", 1)]
    assert collect(link, 1, timeout=1.5) == []
    assert link.stream_messages(S.dispatch_stream) == 0


def test_kv_compare_and_set_detects_a_conflict(link: BrokerLink, peer: BrokerLink) -> None:
    bucket = S.leader_bucket
    assert link.kv.get(bucket, "epoch") is None
    rev = link.kv.create(bucket, "epoch", b"1 sched-a")
    assert rev is not None and link.kv.create(bucket, "epoch", b"1 sched-b") is None
    # Both read revision `rev`; the first update wins, the second sees the conflict.
    assert peer.kv.update(bucket, "epoch", b"2 sched-b", rev) is not None
    assert link.kv.update(bucket, "epoch", b"2 sched-a", rev) is None
    entry = link.kv.get(bucket, "epoch")
    assert entry is not None and entry.value == b"2 sched-b"
    assert link.kv.update(bucket, "epoch", b"3 sched-a", entry.revision) is not None
    link.kv.put(bucket, "holder", b"sched-a")
    assert {k: e.value for k, e in link.kv.entries(bucket).items()} == {"epoch": b"3 sched-a", "holder": b"sched-a"}


def test_kv_entries_lists_every_live_key_of_a_busy_bucket(link: BrokerLink, peer: BrokerLink) -> None:
    # Given more keys than the watcher queues at once, one of them deleted and one rewritten last
    bucket = S.agents_bucket
    for i in range(300):
        link.kv.put(bucket, f"n{i:03d}", b"beat")

    async def delete(key: str) -> None:
        await (await link._client()[1].key_value(bucket)).delete(key)

    link._call(delete("n007"), 5.0, "delete n007")
    link.kv.put(bucket, "n100", b"beat again")
    # When another process lists them, then after the last key is deleted too
    listed = {k: e.value for k, e in peer.kv.entries(bucket).items()}
    link._call(delete("n299"), 5.0, "delete n299")
    after = peer.kv.entries(bucket)
    # Then every live key is there with its newest value, and no deleted one
    assert len(listed) == 299 and "n007" not in listed and listed["n100"] == b"beat again"
    assert set(after) == set(listed) - {"n299"}


def test_kv_entries_keeps_a_key_rewritten_while_it_lists(link: BrokerLink, peer: BrokerLink) -> None:
    # Given agents beating: two keys rewritten in turn again and again while another process lists the bucket
    bucket = S.agents_bucket
    for i in range(50):
        link.kv.put(bucket, f"n{i:02d}", b"beat")
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            for name in ("n00", "n01"):
                link.kv.put(bucket, name, b"beat again")

    t = threading.Thread(target=beat)
    t.start()
    try:
        # When it lists them time after time
        seen = [set(peer.kv.entries(bucket)) for _ in range(20)]
    finally:
        stop.set()
        t.join()
    # Then every listing has every key, the rewritten ones too
    every = {f"n{i:02d}" for i in range(50)}
    assert all(keys == every for keys in seen), [sorted(keys ^ every) for keys in seen]


def test_a_missing_bucket_is_an_error_or_empty_when_allowed(link: BrokerLink) -> None:
    with pytest.raises(TransportError, match="KV bucket other-agents does not exist"):
        link.kv.get("other-agents", "x")
    assert link.kv.entries("other-agents", missing_ok=True) == {}


def test_ensure_streams_is_idempotent_and_two_racing_processes_both_succeed(
    link: BrokerLink, peer: BrokerLink
) -> None:
    fresh = Subjects("race")
    errors: list[BaseException] = []

    def make(lk: BrokerLink) -> None:
        try:
            ensure_streams(lk, fresh)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(lk,)) for lk in (link, peer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ensure_streams(link, fresh)
    assert link.stream_messages(fresh.dispatch_stream) == 0
    assert link.kv.entries(fresh.agents_bucket) == {}
    with pytest.raises(UsageError, match="at least 1"):
        ensure_streams(link, fresh, replicas=0)


def test_stream_replicas_come_from_the_options_and_a_single_server_refuses_three(nats_server: NatsServer) -> None:
    # Given a link whose options ask for three copies of each stream (--stream-replicas 3)
    with BrokerLink.open(BrokerOptions(nats_server.url, prefix="r3", stream_replicas=3)) as lk:
        # When it creates the installation's streams on a server that is no cluster
        # Then the server refuses, and the error names the stream
        with pytest.raises(TransportError, match="r3-dispatch"):
            ensure_streams(lk, Subjects("r3"))
    with pytest.raises(UsageError, match="--stream-replicas must be 1 to 5"):
        BrokerOptions(nats_server.url, stream_replicas=0)


def test_the_broker_restarting_loses_nothing(nats_server: NatsServer, link: BrokerLink) -> None:
    # Given a stored task and a subscription
    link.js_publish(S.dispatch_pool("etl"), b"before")
    link.subscribe(S.hb_all)
    link.take_log()
    # When the broker stops, a task is published while it is down, and it comes back
    nats_server.stop()
    pending = link.js_publish_async(S.dispatch_pool("etl"), b"while-down")
    assert link.js_publish(S.dispatch_pool("etl"), b"also-down", timeout=0.5) is None
    nats_server.start()
    ack = pending.result(30.0)
    # Then both tasks are in the stream once each, in order, and core subscriptions work again
    assert ack.stream == S.dispatch_stream and not ack.duplicate
    link.pull(S.dispatch_stream, S.pool_consumer("etl"), S.dispatch_pool("etl"), window=10)
    got = collect(link, 3, timeout=30.0)
    assert [m.data for m in got] == [b"before", b"while-down", b"also-down"]
    for m in got:
        m.ack()
    assert link.outbox_size == 0
    link.publish(S.hb("n1"), b"beat")
    assert [m.data for m in collect(link, 1)] == [b"beat"]
    log = " | ".join(link.take_log())
    assert "disconnected" in log and "reconnected" in log


def test_a_running_puller_goes_on_after_the_broker_restarts(nats_server: NatsServer, link: BrokerLink) -> None:
    link.pull(S.dispatch_stream, S.pool_consumer("etl"), S.dispatch_pool("etl"), window=4)
    link.js_publish(S.dispatch_pool("etl"), b"a")
    first = collect(link, 1)
    assert [m.data for m in first] == [b"a"]
    first[0].ack()
    nats_server.stop()
    nats_server.start()
    assert link.js_publish(S.dispatch_pool("etl"), b"b", timeout=30.0) is not None
    assert [m.data for m in collect(link, 1, timeout=30.0)] == [b"b"]


def test_close_stops_the_thread_and_fails_what_the_stream_never_acked(nats_server: NatsServer) -> None:
    lk = BrokerLink.open(BrokerOptions(nats_server.url), name="closing")
    ensure_streams(lk, S)
    nats_server.stop()
    pending = lk.js_publish_async(S.dispatch_pool("etl"), b"never")
    lk.close(timeout=0.5)
    assert broker_threads() == []
    with pytest.raises(TransportError, match="closed before the stream acknowledged"):
        pending.result(5.0)
    with pytest.raises(TransportError, match="closed"):
        lk.publish("x", b"")
    lk.close()


def test_an_unreachable_broker_fails_to_open_with_one_line_and_no_thread_left() -> None:
    with pytest.raises(TransportError, match=r"cannot reach the broker at nats://127\.0\.0\.1:1 within 1s"):
        BrokerLink.open(BrokerOptions("nats://127.0.0.1:1"), connect_timeout=1.0)
    assert broker_threads() == []

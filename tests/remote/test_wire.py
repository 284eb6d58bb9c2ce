"""Broker batch layouts and JSON bodies: round trips, splitting, and refusal of bad bytes."""

from __future__ import annotations

import re
import struct

import pytest

from wloadctl.errors import ProtocolError, TransportError
from wloadctl.ipc.protocol import (
    FLAG_TAIL,
    FLAG_TIMED_OUT,
    RES_EXITED,
    RES_STARTED,
    TASK_NOOP,
    TASK_SHELL,
    Payload,
    ResultRecord,
    TaskRecord,
    decode_payload,
    encode_payload,
)
from wloadctl.remote import messages as M
from wloadctl.remote import wire as W


def _tasks(n: int) -> tuple[list[TaskRecord], list[bytes]]:
    tasks, payloads = [], []
    for i in range(n):
        if i % 3:
            tasks.append(TaskRecord(i, 1 + i % 2, TASK_NOOP, 0, 7, 0, 0))
            payloads.append(b"")
        else:
            tasks.append(TaskRecord(i, 1, TASK_SHELL, 0, 7, 0, 0))
            payloads.append(encode_payload(Payload(f"job{i}", f"echo {i}", {"A": "b"}, "/tmp", 5.0, "/l")))
    return tasks, payloads


def _result(i: int, flags: int = 0) -> ResultRecord:
    return ResultRecord(RES_EXITED, flags, 1, i, 2, 0, i % 5, 7, 4000 + i, 10.0, 11.5, 99, 99)


def test_dispatch_round_trip_keeps_tasks_payloads_and_names() -> None:
    tasks, payloads = _tasks(50)
    batch = W.decode_dispatch(W.encode_dispatch(7, "sched-a", "20261201-101010-abc123", tasks, payloads))
    assert (batch.epoch, batch.scheduler, batch.run) == (7, "sched-a", "20261201-101010-abc123")
    assert [t[:5] for t in batch.tasks] == [t[:5] for t in tasks]
    assert batch.payloads == payloads
    assert decode_payload(batch.payloads[3]).command == "echo 3"
    assert batch.tasks[1].length == 0


def test_dispatch_of_many_noop_tasks_packs_in_chunks_and_round_trips() -> None:
    tasks = [TaskRecord(i, 1, TASK_NOOP, 0, 1, 0, 0) for i in range(5000)]
    data = W.encode_dispatch(1, "s", "r", tasks, [b""] * 5000)
    assert len(data) == W.HEAD.size + 2 + 5000 * 20
    assert W.decode_dispatch(data).tasks == tasks


def test_empty_dispatch_round_trips() -> None:
    batch = W.decode_dispatch(W.encode_dispatch(1, "s", "r", [], []))
    assert batch.tasks == [] and batch.payloads == []


def test_split_dispatch_keeps_every_message_within_the_limit_and_the_order() -> None:
    tasks = [TaskRecord(i, 1, TASK_SHELL, 0, 3, 0, 0) for i in range(300)]
    payloads = [bytes([65 + i % 26]) * 1000 for i in range(300)]
    parts = W.split_dispatch(3, "s", "r", tasks, payloads, max_bytes=64 * 1024)
    assert len(parts) == 5 and all(len(p) <= 64 * 1024 for p in parts)
    back = [W.decode_dispatch(p) for p in parts]
    assert [t.task for b in back for t in b.tasks] == list(range(300))
    assert [p for b in back for p in b.payloads] == payloads


def test_split_refuses_a_task_larger_than_a_message() -> None:
    with pytest.raises(ProtocolError, match="more than the 1000-byte message limit"):
        W.split_dispatch(1, "s", "r", [TaskRecord(0, 1, TASK_SHELL, 0, 1, 0, 0)], [b"x" * 2000], max_bytes=1000)


def test_results_round_trip_with_tails_and_job_results() -> None:
    entries = [
        W.ResultEntry(_result(0), b"last lines\n", b'{"rows": 3}'),
        W.ResultEntry(_result(1, FLAG_TAIL | FLAG_TIMED_OUT)),  # no tail: FLAG_TAIL is cleared
        W.ResultEntry(_result(2), b"", b""),  # an empty result file is not "no result"
        W.ResultEntry(ResultRecord(RES_STARTED, 0, 0, 3, 1, 0, 0, 7, 55, 10.0, 0.0, 0, 0)),
    ]
    batch = W.decode_results(W.encode_results("node-1", "run-1", entries))
    assert (batch.agent, batch.run) == ("node-1", "run-1")
    got = batch.entries
    assert got[0].tail == b"last lines\n" and got[0].result == b'{"rows": 3}'
    assert got[0].record.flags & FLAG_TAIL and got[0].record.tail_length == 11
    assert got[1].tail == b"" and got[1].result is None and got[1].record.flags == FLAG_TIMED_OUT
    assert got[2].result == b""
    assert [e.record[2:11] for e in got] == [e.record[2:11] for e in entries]


def test_split_results_round_trips_in_order() -> None:
    entries = [W.ResultEntry(_result(i), b"t" * 500, b"{}") for i in range(100)]
    parts = W.split_results("a", "r", entries, max_bytes=8192)
    assert len(parts) > 1 and all(len(p) <= 8192 for p in parts)
    assert [e.record.task for p in parts for e in W.decode_results(p).entries] == list(range(100))


def _dispatch() -> bytes:
    tasks, payloads = _tasks(4)
    return W.encode_dispatch(2, "s", "r", tasks, payloads)


BAD_DISPATCH = [
    ("empty", b"", "shorter than the 16-byte header"),
    ("foreign", b"XX" + _dispatch()[2:], "not a wloadctl broker message"),
    ("version", _dispatch()[:2] + b"\x09" + _dispatch()[3:], "version 9 (expected 1)"),
    ("kind", _dispatch()[:3] + b"\x02" + _dispatch()[4:], "results message where dispatch was expected"),
    ("cut in names", _dispatch()[:17], "cut short in its names"),
    ("cut in records", _dispatch()[:40], "declares 4 tasks"),
    ("cut in payloads", _dispatch()[:-1], "point outside their data area"),
    ("trailing bytes", _dispatch() + b"x", "point outside their data area"),
]


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in BAD_DISPATCH], ids=[c[0] for c in BAD_DISPATCH])
def test_bad_dispatch_bytes_are_refused_with_a_clear_message(data: bytes, message: str) -> None:
    with pytest.raises(TransportError, match=re.escape(message)):
        W.decode_dispatch(data)


def test_a_tampered_payload_offset_is_refused() -> None:
    data = bytearray(_dispatch())
    first = W.HEAD.size + 2
    struct.pack_into("<I", data, first + 20 + 12, 5)  # second task's offset
    with pytest.raises(ProtocolError, match="point outside their data area"):
        W.decode_dispatch(bytes(data))


def test_bad_results_bytes_are_refused() -> None:
    data = W.encode_results("a", "r", [W.ResultEntry(_result(0), b"tail")])
    with pytest.raises(ProtocolError, match="declares 1 results"):
        W.decode_results(data[:30])
    with pytest.raises(ProtocolError, match="results message where dispatch was expected"):
        W.decode_dispatch(data)
    with pytest.raises(ProtocolError, match="point outside"):
        W.decode_results(data[:-2])


def test_fields_out_of_range_are_refused_on_encode() -> None:
    with pytest.raises(ProtocolError, match="task record does not fit"):
        W.encode_dispatch(1, "s", "r", [TaskRecord(0, 70000, TASK_NOOP, 0, 1, 0, 0)], [b""])
    with pytest.raises(ProtocolError, match="2 tasks but 1 payloads"):
        W.encode_dispatch(1, "s", "r", [TaskRecord(0, 1, 2, 0, 1, 0, 0)] * 2, [b""])
    with pytest.raises(ProtocolError, match="longer than 255 bytes"):
        W.encode_results("a" * 300, "r", [])


def _beat(**kw: object) -> M.Heartbeat:
    base: dict[str, object] = dict(
        agent="n1", pools=["etl"], slots_used=1, slots_total=4, cpus=2.0, memory_mb=2048, load1=0.3,
        rss_kb=5000, mem_free_mb=900, jobs_held=1, held=[["r1", 4, 1]], epoch_seen=3, heard_active=100.0,
        pid=42, host="h1", version="0.1.0", sent=101.0,
    )  # fmt: skip
    base.update(kw)
    return M.Heartbeat(**base)  # type: ignore[arg-type]


def test_heartbeat_round_trips() -> None:
    beat = _beat()
    assert M.Heartbeat.decode(beat.encode()) == beat


def test_requests_decode_to_their_class_and_replies_carry_bytes() -> None:
    for req in (
        M.KillRequest("r1", 4, 2, 15, 3),
        M.InventoryRequest("r1"),
        M.LogsRequest("r1", 4, 2, -100, 4096),
        M.HearRequest(3),
    ):
        assert M.decode_request(req.encode()) == req
    reply = M.Reply("n1", True, held=[{"job": 4, "attempt": 2, "epoch": 3, "state": "running"}], size=12)
    raw = reply.encode(b"out\0put")
    assert M.Reply.decode(raw) == reply and M.split(raw)[1] == b"out\0put"
    assert reply.tasks() == [M.HeldTask(4, 2, 3, "running")]


BAD_BODIES = [
    ("not json", b"{oops", "not UTF-8 JSON"),
    ("not an object", b"[1]", "a list, not an object"),
    ("other version", b'{"v":2,"op":"kill"}', "version 2 (expected 1)"),
    ("unknown op", b'{"v":1,"op":"reboot"}', "unknown request op 'reboot'"),
    ("missing field", b'{"v":1,"op":"kill","run":"r","job":1,"attempt":1,"signal":9}', "lacks field 'epoch'"),
    ("wrong type", b'{"v":1,"op":"inventory","run":5}', "field 'run' is int, expected str"),
    ("bool for int", b'{"v":1,"op":"hear","epoch":true}', "field 'epoch' is bool"),
]


@pytest.mark.parametrize(("raw", "message"), [c[1:] for c in BAD_BODIES], ids=[c[0] for c in BAD_BODIES])
def test_bad_request_bodies_are_refused(raw: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(message)):
        M.decode_request(raw)


def test_heartbeat_with_a_missing_field_is_refused() -> None:
    with pytest.raises(ProtocolError, match="lacks field 'sent'"):
        M.Heartbeat.decode(_beat().encode().replace(b',"sent":101.0', b""))

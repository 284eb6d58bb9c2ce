"""Round trips and rejections of the queue message and shared-memory layouts."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from wloadctl.errors import ProtocolError
from wloadctl.ipc import protocol as p
from wloadctl.ipc.protocol import (
    BoardHeader,
    ExecutorSlot,
    Payload,
    ResultRecord,
    TaskRecord,
)

TASKS = [
    TaskRecord(0, 1, p.TASK_SHELL, 0, 1, 0, 0),
    TaskRecord(2**32 - 1, 2**16 - 1, p.TASK_NOOP, 255, 2**32 - 1, 2**32 - 1, 2**32 - 1),
    TaskRecord(41, 3, p.TASK_SHELL, 1, 7, 4096, 321),
]
RESULTS = [
    ResultRecord(p.RES_ACCEPTED, 0, 0, 5, 1, 0, 0, 1, 0, 0.0, 0.0, 0, 0),
    ResultRecord(
        p.RES_EXITED,
        p.FLAG_TIMED_OUT | p.FLAG_TAIL,
        63,
        2**32 - 1,
        2**16 - 1,
        9,
        -(2**31),
        2**32 - 1,
        2**31 - 1,
        1_700_000_000.125,
        1_700_000_060.5,
        123_456,
        4096,
    ),
    ResultRecord(
        p.RES_REJECTED, p.FLAG_LOST, 1, 7, 2, 0, 2**31 - 1, 3, 99, 1.5, 2.5, 0, 0
    ),
]


def test_record_sizes_match_the_documented_layout() -> None:
    assert p.HEADER.size == 8
    assert p.TASK.size == 20
    assert p.RESULT.size == 48
    assert p.tasks_per_message(8192) == 409
    assert p.results_per_message(8192) == 170


def test_per_message_counts_are_capped_by_the_u16_count() -> None:
    assert p.tasks_per_message(10**7) == p.MAX_COUNT


@pytest.mark.parametrize("size", [0, 8, 27])
def test_message_size_too_small_for_one_record_is_refused(size: int) -> None:
    with pytest.raises(ProtocolError, match="cannot hold one task record"):
        p.tasks_per_message(size)


def test_tasks_round_trip() -> None:
    data = p.encode_tasks(TASKS)
    assert len(data) == 8 + 20 * len(TASKS)
    assert data[:4] == b"WL\x01\x01"
    decoded = p.decode_tasks(data)
    assert decoded == TASKS
    assert all(type(r) is TaskRecord for r in decoded)
    assert decoded[2].offset == 4096


def test_results_round_trip() -> None:
    decoded = p.decode_results(p.encode_results(RESULTS))
    assert decoded == RESULTS
    assert all(type(r) is ResultRecord for r in decoded)
    assert decoded[1].exit_code == -(2**31)


def test_empty_batches_round_trip() -> None:
    assert p.decode_tasks(p.encode_tasks([])) == []
    assert p.decode_results(p.encode_results([])) == []


def test_full_batch_fits_a_default_message() -> None:
    batch = [TaskRecord(i, 1, 1, 0, 1, i, 1) for i in range(p.tasks_per_message(8192))]
    data = p.encode_tasks(batch, max_size=8192)
    assert len(data) <= 8192
    assert p.decode_tasks(bytearray(data)) == batch


def test_decode_accepts_memoryview() -> None:
    assert p.decode_results(memoryview(p.encode_results(RESULTS))) == RESULTS


def test_batch_over_max_size_is_refused_with_the_count_that_fits() -> None:
    batch = [TASKS[0]] * 410
    with pytest.raises(ProtocolError, match="send at most 409"):
        p.encode_tasks(batch, max_size=8192)


def test_field_out_of_range_names_the_record() -> None:
    bad = [TASKS[0], TaskRecord(1, 2**16, 1, 0, 1, 0, 0)]
    with pytest.raises(
        ProtocolError,
        match=r"tasks record 1: attempt=65536 does not fit u16 \(0..65535\)",
    ):
        p.encode_tasks(bad)


def test_wrong_field_type_names_the_record() -> None:
    bad = [RESULTS[0], RESULTS[0]._replace(pid=None)]  # type: ignore[arg-type]
    with pytest.raises(
        ProtocolError, match="results record 1: pid=None does not fit i32"
    ):
        p.encode_results(bad)


def test_result_log_decodes_messages_and_ignores_a_torn_tail() -> None:
    log = (
        p.encode_results(RESULTS[:2]) + p.encode_results([]) + p.encode_results(RESULTS)
    )
    assert p.decode_result_log(log) == RESULTS[:2] + RESULTS
    torn = log + p.encode_results(RESULTS)[:-5]
    assert p.decode_result_log(torn) == RESULTS[:2] + RESULTS
    assert p.decode_result_log(log + b"WL\x01") == RESULTS[:2] + RESULTS
    assert p.decode_result_log(b"") == []


def test_result_log_rejects_a_complete_foreign_message() -> None:
    with pytest.raises(ProtocolError, match="bad magic"):
        p.decode_result_log(p.encode_results(RESULTS) + _header(b"XX", 1, 2, 0))


@pytest.mark.parametrize("bad", [None, (1, 2, 3)])
def test_malformed_record_is_named(bad: object) -> None:
    with pytest.raises(ProtocolError, match="tasks record 1 is not a 7-field record"):
        p.encode_tasks([TASKS[0], bad])  # type: ignore[list-item]


def _header(
    magic: bytes = b"WL", version: int = 1, kind: int = 1, count: int = 1
) -> bytes:
    return struct.pack("<2sBBHH", magic, version, kind, count, 0)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "shorter than the 8-byte header"),
        (b"WL\x01", "shorter than the 8-byte header"),
        (_header(magic=b"XX") + bytes(20), "bad magic b'XX' (expected b'WL')"),
        (_header(version=2) + bytes(20), "protocol version 2 (expected 1)"),
        (_header(kind=2) + bytes(20), "results message where tasks was expected"),
        (_header(kind=9) + bytes(20), "unknown type 9 message where tasks"),
        (_header(count=2) + bytes(20), "declares 2 records (expected 48 bytes)"),
        (_header(count=1) + bytes(21), "declares 1 records (expected 28 bytes)"),
    ],
)
def test_decode_tasks_rejects(data: bytes, fragment: str) -> None:
    with pytest.raises(ProtocolError) as info:
        p.decode_tasks(data)
    assert fragment in str(info.value)


def test_decode_results_rejects_a_tasks_message() -> None:
    with pytest.raises(ProtocolError, match="tasks message where results was expected"):
        p.decode_results(p.encode_tasks(TASKS))


def test_message_type_peeks_after_checking_the_header() -> None:
    assert p.message_type(p.encode_tasks(TASKS)) == p.MSG_TASKS
    assert p.message_type(p.encode_results(RESULTS)) == p.MSG_RESULTS
    assert p.message_type(p.encode_control({"verb": "hold"})) == p.MSG_CONTROL
    with pytest.raises(ProtocolError, match="unknown message type 7"):
        p.message_type(_header(kind=7))
    with pytest.raises(ProtocolError, match="version 3"):
        p.message_type(_header(version=3, kind=1))


def test_control_round_trip() -> None:
    obj = {"verb": "hold", "jobs": ["a", "b"], "who": "ops", "why": "late feed é"}
    data = p.encode_control(obj, max_size=8192)
    assert data[:4] == b"WL\x01\x03"
    assert p.decode_control(data) == obj


def test_control_over_max_size_is_refused() -> None:
    with pytest.raises(ProtocolError, match="exceeds the 100-byte limit"):
        p.encode_control({"jobs": ["x" * 50, "y" * 50]}, max_size=100)


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        (["not", "a", "dict"], "must be a dict"),
        ({"when": object()}, "not JSON-serialisable"),
        ({"ratio": float("nan")}, "not JSON-serialisable"),
    ],
)
def test_control_encode_rejects(obj: object, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        p.encode_control(obj)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"[1, 2]", "is a list, not an object"),
        (b"{bad", "not UTF-8 JSON"),
        (b"\xff", "UTF-8"),
    ],
)
def test_control_decode_rejects(body: bytes, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        p.decode_control(_header(kind=3) + body)


@pytest.mark.parametrize(
    "payload",
    [
        Payload("etl.load", "echo hi && exit 3"),
        Payload(
            "gl.post",
            ["/usr/bin/env", "python3", "-c", "print('é')"],
            env={"BUSINESS_DATE": "2024-01-31"},
            cwd="/srv/batch",
            timeout=90.5,
            log_path="/var/log/wloadctl/gl.post.1.log",
            extra={"user": "batch"},
        ),
        Payload("marker", None, timeout=0.0),
        # Lone surrogates: a byte of a file name that is not UTF-8 (as Python reads it), and one that stands for none
        Payload("load@r_sum_.csv", 'cat "/in/r\udce9sum\udce9.csv"', env={"WLOADCTL_ITEM": "r\udce9sum\udce9.csv"}),
        Payload("each@a_b", ["echo", "a\ud800b"]),
    ],
)
def test_payload_round_trip(payload: Payload) -> None:
    assert p.decode_payload(p.encode_payload(payload)) == payload


def test_payload_is_compact() -> None:
    assert p.encode_payload(Payload("a", "true")) == b'{"v":1,"j":"a","c":"true"}'


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\x00\x01", "not UTF-8 JSON"),
        (b"[]", "not a JSON object"),
        (b'{"v":2,"j":"a","c":null}', "payload version 2"),
        (b'{"v":1,"j":3,"c":null}', "job id"),
        (b'{"v":1,"j":"a","c":[1]}', "command must be"),
        (b'{"v":1,"j":"a","c":null,"e":{"A":1}}', "'e' must map strings"),
        (b'{"v":1,"j":"a","c":null,"t":"soon"}', "timeout must be a number"),
        (b'{"v":1,"j":"a","c":null,"d":1}', "cwd must be a string"),
    ],
)
def test_payload_decode_rejects(data: bytes, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        p.decode_payload(data)


def test_board_header_round_trip() -> None:
    header = BoardHeader(
        run_id="eod-20240131",
        epoch=3,
        scheduler_pid=1234,
        beat=1_700_000_000.25,
        started=1_699_999_000.0,
        n_jobs=500_000,
        n_executors=8,
        done=True,
        counts=tuple(range(16)),
        standby_pid=4321,
        lease_until=1_700_000_005.0,
    )
    packed = p.pack_board_header(header)
    assert len(packed) == p.BOARD_BODY.size == 144
    assert p.unpack_board_header(packed) == header


def test_board_header_pads_short_counts() -> None:
    header = BoardHeader(counts=(5, 6))
    assert (
        p.unpack_board_header(p.pack_board_header(header)).counts == (5, 6) + (0,) * 14
    )


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        (BoardHeader(run_id="r" * 33), "longer than 32 bytes"),
        (BoardHeader(counts=(0,) * 17), "17 state counts"),
        (BoardHeader(epoch=-1), "does not fit the layout"),
    ],
)
def test_board_header_rejects(header: BoardHeader, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        p.pack_board_header(header)


def test_executor_slot_round_trip() -> None:
    slot = ExecutorSlot(
        executor=5,
        pid=777,
        state=1,
        beat=1.5,
        load1=0.75,
        rss_kb=2**40,
        running=2,
        slots=4,
        jobs_done=10,
        seen_epoch=2,
        seen_scheduler_beat=1.25,
        running_tasks=((10, 1), (2**32 - 1, 2**16 - 1)),
    )
    assert p.unpack_executor_slot(p.pack_executor_slot(slot)) == slot


def test_executor_slot_keeps_the_first_sixteen_running_tasks() -> None:
    slot = ExecutorSlot(running=20, running_tasks=tuple((i, 1) for i in range(20)))
    back = p.unpack_executor_slot(p.pack_executor_slot(slot))
    assert back.running == 20
    assert back.running_tasks == tuple((i, 1) for i in range(16))


def test_executor_slot_rejects_out_of_range_fields() -> None:
    with pytest.raises(ProtocolError, match="slot of executor 3"):
        p.pack_executor_slot(ExecutorSlot(executor=3, pid=-1, state=300))


def test_read_identity_rejects_other_kinds_and_versions() -> None:
    buf = bytearray(64)
    p.write_identity(buf, p.ARENA_MAGIC, 10, 0)
    assert p.read_identity(buf, p.ARENA_MAGIC, "payload arena", "/x") == (10, 0)
    with pytest.raises(ProtocolError, match="not a state board"):
        p.read_identity(buf, p.STATE_BOARD_MAGIC, "state board", "/x")
    p.IDENTITY.pack_into(buf, 0, p.ARENA_MAGIC, 9, 0, 10, 0)
    with pytest.raises(ProtocolError, match="layout version 9"):
        p.read_identity(buf, p.ARENA_MAGIC, "payload arena", "/x")
    with pytest.raises(ProtocolError, match="too small"):
        p.read_identity(bytearray(10), p.ARENA_MAGIC, "payload arena", "/x")


def test_protocol_and_memory_twin_import_without_posix_ipc() -> None:
    code = (
        "import sys\n"
        "import wloadctl.ipc.protocol, wloadctl.ipc.memory, wloadctl.ipc.naming\n"
        "assert 'posix_ipc' not in sys.modules, 'posix_ipc was imported'\n"
    )
    root = str(Path(p.__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": root},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr

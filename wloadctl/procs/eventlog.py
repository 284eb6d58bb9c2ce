"""A run's structured event log (events.jsonl), written in the scheduler or, for big runs, by a process of its own.

A million-job run logs two to three million transitions: formatting them as JSON lines and writing some 450 MB
took about an eighth of the scheduler's one thread. From WRITER_FROM jobs the scheduler hands each turn's
transitions, as marshal bytes (a tenth of the formatting's cost), to a writer process (`python -m
wloadctl.procs.eventlog`) through a pipe: it formats and appends them, with the run's other events in the order
they were logged, on the scheduler's other core. The file is the same either way.

The writer ends when its pipe does: at the run's end the scheduler closes it and waits for the file to be whole;
a scheduler killed (-9) leaves the pipe's content to be written all the same. A writer that dies leaves the
scheduler writing in its own process again (the events in the pipe then are lost, and an event says so).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import marshal
import os
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wloadctl.core.states import JobState

_STATE_NAMES = [s.name for s in JobState]

EVENTS_BUFFER = 1 << 16
"""Bytes of events gathered before they are written (each beat writes what there is)."""
EVENTS_KEPT = 16 << 20
"""Most bytes of events kept in memory while the disk is full; older ones are dropped (and counted)."""


class EventLog:
    """Structured events (JSON lines) of a run: every transition, alert and operator action, with trace ids.

    A full disk does not stop the run: what cannot be written is kept (up to EVENTS_KEPT bytes)
    and written, in order, once there is space again.
    """

    def __init__(self, path: Path, run_id: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        """The events file."""
        self.run_id = run_id
        """Trace id of the run; an attempt's trace id is `<run>.<job index>.<attempt>`."""
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        """The file, opened for appending."""
        self.pending: list[str] = []
        """Events not yet written."""
        self.size = 0
        """Characters in `pending`."""
        self.unwritten = b""
        """The part of a write the disk refused, written first next time."""
        try:
            # A line an earlier scheduler left cut (its disk full when it died) is ended before this one's first:
            # the two would read as one broken line.
            with open(path, "rb") as f:
                if f.seek(0, os.SEEK_END) and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                    self.unwritten = b"\n"
        except OSError:
            pass
        self.dropped = 0
        """Events dropped because the disk stayed full too long (reported once space returns)."""
        self.error: OSError | None = None
        """Why the last write failed (None: the last write went through)."""
        names = _STATE_NAMES
        self.heads = [f'"event":"transition","from":"{names[f]}","to":"{names[t]}",' if f < len(names) and
                      t < len(names) else "" for f in range(16) for t in range(16)]
        """The from/to part of a transition event, by from * 16 + to."""

    def _add(self, text: str) -> None:
        self.pending.append(text)
        self.size += len(text)
        if self.size >= EVENTS_BUFFER:
            self.flush()

    def transitions(self, tx: list[tuple], ids: list[str]) -> None:
        """One `transition` event per journaled transition but WAITING -> READY.

        READY follows from the upstreams' ends (the journal has it); leaving it out keeps the log
        to what an attempt did: queued, started, ended, and every retry, hold, skip or failure.
        """
        rid = self.run_id
        heads = self.heads
        out: list[str] = []
        append = out.append
        # A turn's transitions mostly share one time: its text (and the line's start) is made once for them.
        last_ts = None
        start = ""
        for i, frm, to, att, ts, ex, code, reason, cause in tx:
            if frm == 0 and to == 1:
                continue
            if ts != last_ts:
                last_ts = ts
                start = f'{{"ts":{ts:.6f},"run":"{rid}","job":'
            jid = ids[i]
            # Plan ids are letters, digits and _.:-@ : quoting them needs no escapes.
            q = json.dumps(jid) if '"' in jid or "\\" in jid else f'"{jid}"'
            if reason:
                extra = f',"reason":{json.dumps(reason)}'
                if code is not None:
                    extra += f',"exit":{code}'
                if ex >= 0:
                    extra += f',"executor":{ex}'
            elif code is None:
                extra = f',"executor":{ex}' if ex >= 0 else ""
            else:
                extra = f',"exit":{code},"executor":{ex}' if ex >= 0 else f',"exit":{code}'
            append(f'{start}{q},"attempt":{att},"trace":"{rid}.{i}.{att}",{heads[frm * 16 + to]}"cause":"{cause}"'
                   f'{extra}}}\n')
        if out:
            self._add("".join(out))

    def actions(self, rows: Sequence[tuple[float, str, str, str, str, str, bool]], **more: object) -> None:
        """One `action` event per audit row (ts, user, verb, job, reason, outcome, applied), as `emit` writes it.

        A glob's verb has one row per job, mostly alike: what they share is encoded once.
        """
        out: list[str] = []
        append = out.append
        head = f'{{"ts":{round(time.time(), 6)!r},"run":{json.dumps(self.run_id)},"job":'
        last: tuple[str, str, str] | None = None
        mid = ""
        tail = "".join(f",{json.dumps(k)}:{json.dumps(v)}" for k, v in more.items()) + "}\n"
        for _ts, user, verb, job, reason, outcome, applied in rows:
            if (user, verb, reason) != last:
                last = (user, verb, reason)
                mid = (f',"attempt":0,"event":"action","trace":{json.dumps(self.run_id)},"user":{json.dumps(user)},'
                       f'"verb":{json.dumps(verb)},"reason":{json.dumps(reason)},"outcome":')
            append(f'{head}{json.dumps(job)}{mid}{json.dumps(outcome)},"applied":{"true" if applied else "false"}'
                   f'{tail}')
        if out:
            self._add("".join(out))

    def emit(self, event: str, job: str = "", attempt: int = 0, **fields: object) -> None:
        """One event of another kind (alert, action, executor, scheduler)."""
        self.emit_fields(event, fields, job, attempt)

    def emit_fields(self, event: str, fields: Mapping[str, object], job: str = "", attempt: int = 0) -> None:
        """`emit` with the event's other fields in a mapping (as the pools report them)."""
        rec = {"ts": round(time.time(), 6), "run": self.run_id, "job": job, "attempt": attempt, "event": event,
               "trace": self.run_id, **fields}
        self._add(json.dumps(rec) + "\n")

    def flush(self) -> bool:
        """Write the events gathered so far (each beat); return False if the disk refused them (they are kept).

        A short write leaves the file ending mid-line; the rest of that line is written first
        next time, so the file never holds a torn or repeated event.
        """
        if self.pending:
            self.unwritten += "".join(self.pending).encode()
            self.pending.clear()
            self.size = 0
        if self.dropped and not self.error:
            note = {"ts": round(time.time(), 6), "run": self.run_id, "job": "", "attempt": 0,
                    "event": "events_dropped", "trace": self.run_id, "count": self.dropped,
                    "why": "the disk of the state directory was full"}
            self.unwritten += (json.dumps(note) + "\n").encode()
            self.dropped = 0
        data = memoryview(self.unwritten)
        done = 0
        try:
            while done < len(data):
                done += os.write(self.fd, data[done:])
        except OSError as e:
            self.error = e
            self.unwritten = bytes(data[done:])
            self._trim()
            return False
        self.error = None
        self.unwritten = b""
        return True

    def _trim(self) -> None:
        """Keep at most EVENTS_KEPT bytes of unwritten events, dropping whole old lines (but the torn first one)."""
        over = len(self.unwritten) - EVENTS_KEPT
        if over <= 0:
            return
        head = self.unwritten.find(b"\n") + 1  # the rest of a line already begun in the file
        cut = self.unwritten.find(b"\n", head + over) + 1
        if cut <= head:
            return
        self.dropped += self.unwritten.count(b"\n", head, cut)
        self.unwritten = self.unwritten[:head] + self.unwritten[cut:]

    def close(self) -> None:
        """Write what is left (as far as the disk allows) and close."""
        if self.fd < 0:
            return
        self.flush()
        os.close(self.fd)
        self.fd = -1


WRITER_FROM = 100_000
"""Jobs of a run from which its events are written by a process of its own (a smaller run's take little time)."""
PIPE_BYTES = 1 << 20
"""Size asked for the writer's pipe (the system's default, 64 KiB, where it refuses)."""
WRITER_WAIT = 120.0
"""Longest a run's end waits for its writer to write what it was given."""
_FRAME = struct.Struct("<cI")
"""A message to the writer: its kind and the length of what follows."""
_TEXT, _IDS, _TRANSITIONS = b"T", b"I", b"X"
"""Kinds of messages: lines of events, job ids (by index, from the last sent on), a turn's transitions."""


def event_log(path: Path, run_id: str, jobs: int) -> EventLog:
    """The event log of a run of `jobs` jobs: written by a process of its own from WRITER_FROM jobs (in this one
    where that process cannot be started)."""
    if jobs >= WRITER_FROM:
        try:
            return PipedEventLog(path, run_id)
        except OSError:
            pass
    return EventLog(path, run_id)


class PipedEventLog(EventLog):
    """An EventLog whose events a writer process formats and writes (see the module's docstring)."""

    def __init__(self, path: Path, run_id: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            try:
                fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
            except OSError:
                pass  # (over /proc/sys/fs/pipe-max-size for this user: the default size)
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "wloadctl.procs.eventlog", str(path), run_id], stdin=r,
                stdout=subprocess.DEVNULL, close_fds=True, start_new_session=True)
            """The writer (None once it is gone)."""
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
        self.path = path
        self.run_id = run_id
        self.fd = -1
        self.pipe = w
        """The pipe's end this process writes (-1 once closed)."""
        self.pending: list[str] = []
        self.size = 0
        self.unwritten = b""
        self.dropped = 0
        self.error = None
        self.out: list[tuple[bytes, Any]] = []
        """Messages not yet sent: (kind, text or marshal bytes), in order."""
        self.known = 0
        """Job ids the writer has been sent."""
        self.ids: list[str] = []
        """The run's job ids, as last given (the core's list, which only grows)."""
        self.local: EventLog | None = None
        """The log written in this process once the writer is gone."""
        atexit.register(self.close)  # a run left by an exception still leaves a whole file behind

    def _add(self, text: str) -> None:
        if self.local is not None:
            self.local._add(text)
            return
        self.out.append((_TEXT, text))
        self.size += len(text)
        if self.size >= EVENTS_BUFFER:
            self.flush()

    def transitions(self, tx: list[tuple], ids: list[str]) -> None:
        if self.local is not None:
            self.local.transitions(tx, ids)
            return
        self.ids = ids
        if len(ids) > self.known:
            self.out.append((_IDS, ids[self.known:]))
            self.known = len(ids)
        data = marshal.dumps(tx)
        self.out.append((_TRANSITIONS, data))
        self.size += len(data)
        if self.size >= EVENTS_BUFFER:
            self.flush()

    def flush(self) -> bool:
        if self.local is not None:
            return self.local.flush()
        if not self.out:
            return True
        out, self.out = self.out, []
        self.size = 0
        chunks = []
        for kind, what in out:
            data = what.encode() if kind == _TEXT else marshal.dumps(what) if kind == _IDS else what
            chunks.append(_FRAME.pack(kind, len(data)))
            chunks.append(data)
        data = memoryview(b"".join(chunks))
        done = 0
        try:
            while done < len(data):
                done += os.write(self.pipe, data[done:])
        except OSError as e:
            self._go_local(e, out if done == 0 else [])
            return self.local.flush() if self.local is not None else False
        return True

    def _go_local(self, e: OSError, unsent: list[tuple[bytes, Any]]) -> None:
        """The writer is gone: log here from now on, beginning with what it was not sent."""
        self._end_writer(wait=0.0)
        local = self.local = EventLog(self.path, self.run_id)
        local.emit("events_writer_lost", why=e.strerror or str(e),
                   note="events sent to the writer and not yet written may be missing before this one")
        for kind, what in unsent:
            if kind == _TEXT:
                local._add(what)
            elif kind == _TRANSITIONS:
                local.transitions(marshal.loads(what), self.ids)

    def _end_writer(self, wait: float) -> None:
        if self.pipe >= 0:
            os.close(self.pipe)
            self.pipe = -1
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass  # it goes on writing by itself, and ends when it has written everything

    def close(self) -> None:
        """Send what is left, and wait for the writer to have written everything (WRITER_WAIT at most)."""
        atexit.unregister(self.close)
        if self.local is None and self.pipe >= 0:
            self.flush()
        self._end_writer(wait=WRITER_WAIT)
        if self.local is not None:
            self.local.close()


def _serve(path: Path, run_id: str) -> int:
    """The writer: read messages from standard input until it ends, write their events to `path`."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # it ends when the scheduler's end of the pipe does, and not before
    log = EventLog(path, run_id)
    ids: list[str] = []
    buf = bytearray()
    head = _FRAME.size
    ended = False
    while not ended:
        if log.unwritten:
            # The disk refused a write: try again every second while nothing new comes.
            ready, _, _ = select.select([0], [], [], 1.0)
            if not ready:
                log.flush()
                continue
        try:
            data = os.read(0, PIPE_BYTES)
        except InterruptedError:
            continue
        ended = not data
        buf += data
        at = 0
        while len(buf) - at >= head:
            kind, size = _FRAME.unpack_from(buf, at)
            if len(buf) - at - head < size:
                break
            body = bytes(buf[at + head : at + head + size])
            at += head + size
            if kind == _TRANSITIONS:
                log.transitions(marshal.loads(body), ids)
            elif kind == _TEXT:
                log._add(body.decode())
            elif kind == _IDS:
                ids.extend(marshal.loads(body))
        del buf[:at]
        log.flush()
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(_serve(Path(sys.argv[1]), sys.argv[2]))

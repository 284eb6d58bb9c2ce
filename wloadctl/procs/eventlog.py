"""A run's structured event log (events.jsonl): one JSON line per transition, alert and operator action."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

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


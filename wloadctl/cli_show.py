"""Read and control verbs of the CLI: status, hold/release/..., why, history, lineage, show, logs, audit."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wloadctl.client import RunClient, board_status
from wloadctl.core.sla import flag_lines
from wloadctl.core.states import TERMINAL, JobState
from wloadctl.errors import printable
from wloadctl.jobdef import definition_lines
from wloadctl.logview import BLOCK, Shown, tail_start
from wloadctl.stdoutguard import to_devnull
from wloadctl.store.base import JournalUnavailable

if TYPE_CHECKING:
    from wloadctl.remote.broker import BrokerOptions

_BAD = ("FAILED", "TIMED_OUT", "UPSTREAM_FAILED")
_ENDED_SHORT = ("cancelled", "held")
"""Run statuses of a run that ended without its jobs done (`run` exits 1 for them too)."""
HELD_SHOWN = 10
"""Held jobs the held line of `status` names (the job lines below it list them, --json's `held` the first 50)."""


NOT_RESPONDING_EXIT = 3
"""`status` of a live run whose scheduler does not respond (stopped or hung): the runtime failure's code, as a
status that cannot read the journal and a verb the scheduler does not answer exit."""


def status_exit(st: dict[str, Any]) -> int:
    """The exit code of `status` in every form (text, --json, --at), from the run's status as `status --json`
    gives it: 1 when the run is not going on (finished, interrupted) and a job FAILED, TIMED_OUT or was
    UPSTREAM_FAILED, or it was cancelled or ended holding (as `run` exits); 3 (NOT_RESPONDING_EXIT) when it is
    going on but its scheduler does not respond (its beat is older than its lease allows); else 0."""
    if st.get("responding") is False:
        return NOT_RESPONDING_EXIT
    return 1 if not st["live"] and (any(st["counts"].get(b) for b in _BAD) or st.get("status") in _ENDED_SHORT) \
        else 0


def history_headline(data: dict[str, Any]) -> str:
    """The first line of `history`: the job's state and how many times it ran (not its dispatches)."""
    ran, unstarted = data["attempts"], data.get("unstarted", 0)
    if ran:
        head = f"{data['job']}: {data['state']} after {ran} attempt(s)"
        if data.get("attempt", ran) != ran:
            head += f" (attempt {data['attempt']})"
    else:
        head = f"{data['job']}: {data['state']}, " + ("never ran" if JobState[data["state"]] in TERMINAL
                                                      else "not run yet")
    if unstarted:
        head += f"; {unstarted} dispatch(es) handed back unstarted"
    return head


def _ts(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"


def agent_line(g: dict[str, Any]) -> str:
    """An agent's line of `status`. The figures of one no longer beating (SUSPECT, LOST, STOPPED) are its last
    beat's, and said so: a LOST agent's jobs have been run elsewhere since, though it last held them."""
    age = f"{g['age']:.1f}s ago" if g.get("age") is not None else "never"
    last = "as last heard: " if g["state"] in ("SUSPECT", "LOST", "STOPPED") else ""
    return (f"  agent {g['agent']}: {g['state']}, pools {','.join(g['pools']) or '-'}, {last}"
            f"running {g['slots_used']}/{g['slots']}, load {g['load1']:.2f}, holds {g['jobs_held']}, beat {age}")


def job_line(j: dict[str, Any]) -> str:
    """A job's line of `status` and `status --at`: its state, id and reason, a SUCCEEDED one's too (`set ok by
    ann`: it never ran; `all 3 instance(s) finished`), as --json and `why` give it."""
    return f"  {j['state']:<15} {j['job']}" + (f"  {j['reason']}" if j.get("reason") else "")


def show_status(a: argparse.Namespace, state_dir: Path | None) -> int:
    """`wloadctl status`."""
    try:
        with RunClient(state_dir) as c:
            brief = not (a.json or a.all)
            st = c.status(with_jobs=True, only_unfinished=brief, limit=201 if brief else -1)
    except JournalUnavailable as unreachable:
        # The run's scheduler is live here all the same: what its boards show, then the error.
        board = board_status(state_dir) if state_dir is not None else None
        if board is None:
            raise
        _board_only(board, unreachable, a.json)
        raise
    if a.json:
        # Compact: the C encoder is an order of magnitude faster than the indenting one at 100k jobs.
        print(json.dumps(st, separators=(",", ":")))
        return status_exit(st)
    counts = "  ".join(f"{k} {v}" for k, v in st["counts"].items())
    standby = f", standby pid {st['standby_pid']}" if st.get("standby_pid") else ""
    host = f" on {st['scheduler_host']}" if st.get("scheduler_host") else ""
    beat = f", beat {st['scheduler_beat_age']:.1f}s ago" if st.get("scheduler_beat_age") is not None else ""
    live = f"live, scheduler pid {st['scheduler_pid']}{host}{standby}, epoch {st['epoch']}{beat}" if st["live"] \
        else st["status"]
    if st.get("responding") is False:
        live = (f"NOT RESPONDING: scheduler pid {st['scheduler_pid']}{host}, epoch {st['epoch']}, last beat "
                f"{st['scheduler_beat_age']:.1f}s ago (stopped or hung; counts are as of then)")
    if st["status"] == "holding":
        live = f"HOLDING, {live}"
    if st.get("paused"):
        live = f"PAUSED: {st['paused']}, {live}"
    print(f"run {st['run']}  plan {st['plan']}  business date {st['business_date']}  ({live})")
    print(f"{st['total']} jobs: {counts}")
    held = [j for j in st.get("held", []) if j not in st.get("confirm", [])]
    if held:
        n = st["counts"].get("HELD", 0) - len(st.get("confirm", []))
        shown = held[:HELD_SHOWN]
        more = f" and {n - len(shown):,} more" if n > len(shown) else ""
        print(f"held ({n:,}), released with `wloadctl release JOB`: {', '.join(shown)}{more}")
    for line in pending_lines({"confirm": st.get("confirm"), "requests": st.get("pending")}):
        print(line)
    for line in flag_lines(st.get("flags") or {}):
        print(line)
    if st.get("last_drill"):
        print(f"last drill ({_ts(st['last_drill']['ts'])}, {st['last_drill']['user']}): {st['last_drill']['summary']}")
    alone = " with no scheduler" if not st.get("live") else ""
    for e in st["executors"]:
        print(f"  executor {e['executor']}: pid {e['pid']} {e['health']}{alone}, beat {e['beat_age']:.1f}s ago, "
              f"running {e['running']}/{e['slots']}, load {e['load1']}, rss {e['rss_kb'] // 1024} MiB")
    if st.get("broker_lost"):
        lost = st["broker_lost"]
        print(f"BROKER LOST: {lost['broker']} does not answer since {_ts(lost['since'])} "
              f"({max(0.0, time.time() - lost['since']):.0f}s): the agents are as last heard, their jobs' ends "
              "reach the run once it is back (the scheduler reconnects)")
    for g in st.get("agents", []):
        print(agent_line(g))
        if g.get("duplicates"):
            print(f"    {len(g['duplicates'])} agents run under the name {g['agent']}: {'; '.join(g['duplicates'])} "
                  "(give each its own --name)")
    shown = st["jobs"]
    for j in shown[:200 if not a.all else None]:
        print(job_line(j))
    if not a.all and len(shown) > 200:
        print("  ... more (use --all or --json)")
    return status_exit(st)


REFUSALS_TOLD = 5
"""Refusals of one verb told one by one (the rest are counted)."""


def show_verb(a: argparse.Namespace, state_dir: Path | None) -> int:
    """`wloadctl hold|release|retry|rerun|kill|set-ok|skip|cancel|approve|reject`."""
    from wloadctl.cli_run import broker_of

    # --broker: the scheduler may be on another host; its answer comes back through the broker.
    with RunClient(state_dir, broker=broker_of(a) if a.broker else None) as c:
        rep = c.control(a.cmd, list(getattr(a, "jobs", [])), reason=a.reason,
                        downstream=bool(getattr(a, "downstream", False)))
    if a.json:
        print(json.dumps(rep, indent=1))
    else:
        if rep.get("error"):
            print(f"wloadctl: {rep['error']}", file=sys.stderr)
        if rep.get("message"):
            print(rep["message"])
        results = rep.get("results", [])
        refused = [r for r in results if not r[1]]
        # Past the lines a reply carries, it counts the jobs applied and refused in all.
        more = bool(rep.get("more"))
        refused_all = int(rep.get("refused", len(refused))) if more else len(refused)
        # A glob's refusals, one for each job it names that the verb does not apply to, are counted past a few.
        told = refused if refused_all <= REFUSALS_TOLD else refused[:REFUSALS_TOLD - 1]
        for r in results:
            _job, applied, msg = r
            if applied:
                print(msg)
            elif r in told:
                print(f"refused: {msg}", file=sys.stderr)
        if len(told) < refused_all:
            print(f"refused: {refused_all - len(told)} more job(s) it does not apply to (see `wloadctl audit`)",
                  file=sys.stderr)
        if more:
            shown = sum(1 for job, applied, _msg in results if applied and job != "*")
            rest = int(rep.get("applied", shown + int(rep["more"]))) - shown
            if rest > 0:
                print(f"... and {rest} more job(s) it applied to (see `wloadctl audit`)")
    return 0 if rep.get("ok") else 1


def show_read(a: argparse.Namespace, state_dir: Path | None) -> int:
    """`wloadctl why|history|lineage|show|logs|audit`."""
    with RunClient(state_dir) as c:
        if a.cmd == "logs":
            c.log_broker = _log_broker(c, a)
            return _logs(c, a)
        data: Any
        agents = c.agent_names()
        if a.cmd == "why":
            data = c.why(a.job)
        elif a.cmd == "history":
            data = c.history(a.job)
        elif a.cmd == "lineage":
            data = c.lineage(a.job)
        elif a.cmd == "show":
            data = c.definition(a.job)
        elif a.cmd == "pending":
            data = c.pending()
        elif getattr(a, "verify", False):
            return _verify(c, a.json)
        else:
            data = c.actions()
    if a.json:
        print(json.dumps(data, indent=1))
        return 0
    if a.cmd == "why":
        print(f"{data['job']} is {data['state']} (tier {data['tier']}, attempt {data['attempt']})")
        for r in data["reasons"]:
            print(f"  - {_agent_words(r, agents)}")
        if data["verbs"]:
            print(f"  verbs that apply: {', '.join(data['verbs'])}")
    elif a.cmd == "history":
        print(history_headline(data))
        # Operators' actions among the transitions, in time order (an action before the transitions it made).
        # (one refused says so, as `audit` does: "waits for confirmation" read as a release that had worked)
        lines = [(x["ts"], f"  {_ts(x['ts'])} {x['user']} {x['verb']} ({x['reason'] or 'no reason'}): "
                           + ("" if (word := action_word(x)) == "applied" else f"{word}: ") + x["outcome"])
                 for x in data["actions"]]
        ran_on: dict[int, int] = {}
        for t in data["transitions"]:
            code = f" exit {t['exit_code']}" if t["exit_code"] is not None else ""
            ex = f" on agent {agents[t['executor']]}" if t["executor"] in agents else \
                f" on executor {t['executor']}" if t["executor"] >= 0 else ""
            why = t["reason"] or ""
            if t["executor"] >= 0:
                ran_on[t["attempt"]] = t["executor"]
            lost = ran_on.get(t["attempt"], -1)  # the transition that gives it up names none
            if lost in agents:
                why = why.replace("executor lost", f"agent {agents[lost]} lost")
            reason = f"  {_agent_words(why, agents)}" if why else ""
            lines.append((t["ts"], f"  {_ts(t['ts'])} #{t['attempt']} {t['from']} -> {t['to']}{ex}{code}{reason}"))
        lines.sort(key=lambda pair: pair[0])  # stable: the journal's own order where times are equal
        for _, text in lines:
            print(printable(text))  # (an operator's reason of an earlier version's journal holds what it was given)
    elif a.cmd == "pending":
        print("\n".join(map(printable, pending_lines(data))) or "nothing waits for an approve")
    elif a.cmd == "show":
        print("\n".join(map(printable, definition_lines(data))))
    elif a.cmd == "lineage":
        print(f"{data['job']}: {len(data['upstream'])} upstream, {len(data['downstream'])} downstream")
        print("  upstream:   " + (", ".join(data["upstream"]) or "-"))
        print("  downstream: " + (", ".join(data["downstream"]) or "-"))
    else:
        if not data:
            print(f"no operator actions in run {c.run.run_id}")
        for x in data:
            print(printable(f"{_ts(x['ts'])} {x['user']:<10} {x['verb']:<8} {x['job']:<30} {action_word(x)}: "
                            f"{x['outcome']}"
                            + (f"  reason: {x['reason']}" if x["reason"] else "")))
    return 0


def action_word(x: dict[str, Any]) -> str:
    """How an operator's action ended, as `audit` and `history` say it: applied, pending (a second person's approve),
    refused; a drill passed or failed."""
    if x["verb"] == "drill":
        return "passed" if x["applied"] else "failed"
    return "applied" if x["applied"] else "pending" if x["outcome"].startswith("pending R") else "refused"


def _agent_words(text: str, agents: dict[int, str]) -> str:
    """`text` with each "executor N" that is an agent's node index said as "agent NAME"."""
    if not agents:
        return text
    return re.sub(r"\bexecutor (\d+)\b", lambda m: f"agent {agents[int(m[1])]}" if int(m[1]) in agents
                  else m[0], text)


def pending_lines(data: dict[str, Any]) -> list[str]:
    """What waits for an operator's approve, for `status` and `pending`: confirmation jobs and requests."""
    from wloadctl.core.foureyes import request_words

    out = []
    if data.get("confirm"):
        out.append(f"waiting for confirmation ({len(data['confirm'])}), started with `wloadctl approve JOB`: "
                   f"{', '.join(data['confirm'])}")
    for r in data.get("requests") or []:
        what = request_words(r)  # (all it asks for: with downstream, the jobs it reaches whose four eyes count)
        why = f" ({r['reason']})" if r["reason"] else ""
        out.append(f"pending {r['id']}: {what} asked by {r['user']} at {_ts(r['ts'])}{why}; "
                   f"`wloadctl approve {r['id']}` by another admin applies it, `wloadctl reject {r['id']}` drops it")
    return out


def _verify(c: RunClient, as_json: bool) -> int:
    rep = c.verify_audit()
    if as_json:
        print(json.dumps(rep, indent=1))
    elif rep["ok"]:
        print(f"audit chain intact: {rep['checked']} action(s) checked"
              + (f", {rep['unchained']} from before the chain" if rep["unchained"] else ""))
    else:
        b = rep["broken"]
        print(f"wloadctl: audit chain broken at action {b['seq']} of run {b['run']} ({b['action']}): "
              f"{b['problem']}; {rep['checked']} action(s) before it hold", file=sys.stderr)
    return 0 if rep["ok"] else 1


def _board_only(st: dict[str, Any], e: JournalUnavailable, as_json: bool) -> None:
    """Status of a live run whose journal is unreachable, from its scheduler's boards (stdout; the journal's
    error follows on stderr)."""
    if as_json:
        print(json.dumps({**st, "journal_unreachable": e.one_line()}, separators=(",", ":")))
        return
    print(f"run {st['run']}  (live, scheduler pid {st['scheduler_pid']}, epoch {st['epoch']}, beat "
          f"{st['scheduler_beat_age']:.1f}s ago; JOURNAL UNREACHABLE: nothing is dispatched until it is back, "
          "counts are the scheduler's own)")
    print(f"{st['total']} jobs: {'  '.join(f'{k} {v}' for k, v in st['counts'].items())}")
    for x in st["executors"]:
        print(f"  executor {x['executor']}: pid {x['pid']} {x['health']}, beat {x['beat_age']:.1f}s ago, "
              f"running {x['running']}/{x['slots']}, load {x['load1']}, rss {x['rss_kb'] // 1024} MiB")


def _log_broker(c: RunClient, a: argparse.Namespace) -> BrokerOptions | None:
    """The broker options of `logs` (URL and prefix default to the run's; None: no broker anywhere)."""
    from wloadctl.remote.broker import ENV_BROKER, ENV_PREFIX, BrokerOptions

    if not hasattr(a, "broker_user"):  # the command's parser was not built with the broker's options
        return None
    settings = json.loads(c.run.settings or "{}")
    url = a.broker or os.environ.get(ENV_BROKER) or settings.get("broker")
    if not url:
        return None
    prefix = a.prefix or os.environ.get(ENV_PREFIX) or settings.get("prefix")
    return BrokerOptions.from_args(argparse.Namespace(**{**vars(a), "broker": url, "prefix": prefix}))


def _logs(c: RunClient, a: argparse.Namespace) -> int:
    path = c.log_file(a.job, a.attempt)
    if a.json:
        return _logs_json(c, a, path)
    shown = Shown(raw=a.raw or not sys.stdout.isatty())
    pos: int | None = None if a.tail else 0
    while True:
        if pos and a.follow:
            c.log_file(a.job, a.attempt)  # a job on an agent: its log is copied again
        got = False
        try:
            with open(path, "rb") as f:
                f.seek(tail_start(f, a.tail) if pos is None else pos)
                while block := f.read(BLOCK):
                    got = True
                    if not _out(shown.feed(block)):
                        return 0  # the reader went away (`logs JOB | head`): nobody reads what would follow
                pos = f.tell()
        except FileNotFoundError:
            # A log is made at a job's first output: an attempt that ended without one printed nothing.
            if not a.follow:
                row = c.store.job_row(c.run.id, a.job)
                if row is not None and (row[2] not in (2, 3) or (a.attempt or row[3]) < row[3]):
                    # Said on stderr: what a script reads of stdout stays the (empty) output. An attempt number
                    # whose dispatch came back before it started (a follower handed back) ran nothing to print.
                    att = a.attempt or row[3]
                    story = c.store.job_story(c.run.id, a.job)
                    ran = story is None or any(t[1] == JobState.RUNNING and t[2] == att for t in story[1])
                    said = "printed nothing" if ran else "never started (no process ran): it has no output"
                    print(f"wloadctl: {a.job} attempt {att} {said}", file=sys.stderr)
                    return 0
                print(f"wloadctl: no output yet for {a.job} ({path})", file=sys.stderr)
                return 1
        if not a.follow:
            _out(shown.end())
            return 0
        row = c.store.job_row(c.run.id, a.job)
        if row is not None and row[2] not in (2, 3) and not got:
            _out(shown.end())
            return 0
        time.sleep(0.25)


def _out(chunk: bytes) -> bool:
    """Write a log's bytes to stdout: False when its reader is gone (stdout goes to /dev/null from then)."""
    try:
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
    except BrokenPipeError:
        to_devnull(sys.stdout)
        return False
    return not getattr(sys.stdout, "reader_gone", False)  # (the guard of cli.main took a failed flush)


def _logs_json(c: RunClient, a: argparse.Namespace, path: Path) -> int:
    """`logs --json`: the attempt's output as one object, its text read as UTF-8 (bad bytes replaced); the
    exit code is the text form's."""
    from wloadctl.core.states import JobState

    row = c.store.job_row(c.run.id, a.job)
    assert row is not None  # (log_file found it)
    attempt = a.attempt or row[3]
    try:
        with open(path, "rb") as f:
            f.seek(tail_start(f, a.tail) if a.tail else 0)
            data: bytes | None = f.read()
    except FileNotFoundError:
        data = None  # a log is made at a job's first output
    waiting = data is None and row[2] in (2, 3) and attempt == row[3]
    print(json.dumps({"run": c.run.run_id, "job": a.job, "attempt": attempt, "state": JobState(row[2]).name,
                      "path": str(path), "bytes": len(data or b""),
                      "note": "no output yet" if waiting else "printed nothing" if data is None else "",
                      "text": (data or b"").decode("utf-8", "replace")}, indent=1))
    return 1 if waiting else 0

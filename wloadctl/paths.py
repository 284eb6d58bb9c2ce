"""Where a run's files live in its state directory: logs, checkpoints, results."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from wloadctl.errors import UsageError


def state_root() -> Path:
    """The directory runs' state directories are made under when none is given.

    $WLOADCTL_HOME, else `wloadctl` under $XDG_STATE_HOME (by default ~/.local/state).
    """
    home = os.environ.get("WLOADCTL_HOME")
    if home:
        return Path(home)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "wloadctl"


def named_state_dir(given: str | None) -> str | None:
    """The state directory a command line names: its --state-dir, else $WLOADCTL_STATE_DIR (None: neither).

    Every command takes it so: `run` and `trigger` then use the plan's directory under the state root,
    the other verbs the latest run.
    """
    return given or os.environ.get("WLOADCTL_STATE_DIR") or None


def make_state_dir(state_dir: Path) -> None:
    """Make the state directory (and its parents) where it is not there.

    Raises:
        UsageError: it cannot be made, or is something else than a directory.
    """
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise unusable_state_dir(state_dir, e) from None


def refuse_non_directory(state_dir: Path) -> None:
    """Refuse, as `run` does, a state directory named where something else than a directory is (a reader or a
    resume would otherwise say it holds no journal).

    Raises:
        UsageError: it is a file (or another non-directory).
    """
    if state_dir.exists() and not state_dir.is_dir():
        raise unusable_state_dir(state_dir, NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)))


NAME_BYTES = 255
"""The longest name a file system takes for one part of a path (NAME_MAX)."""
PATH_BYTES = 4095
"""The longest path the kernel takes (PATH_MAX less its end)."""


def state_dir_text(text: str) -> str:
    """`--state-dir` as given, when it can name a directory at all (the argparse type of the option).

    Raises:
        argparse.ArgumentTypeError: it is empty (taken as left out, a run went to the default directory),
            or a part of it, or the whole, is longer than any file system takes (said as an internal error).
    """
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path: give a directory, or leave --state-dir out")
    long = next((part for part in text.split("/") if len(part.encode()) > NAME_BYTES), None)
    if long is not None:
        raise argparse.ArgumentTypeError(f"a name in the path ('{long[:24]}...', {len(long.encode())} bytes) is "
                                         f"longer than a file system takes ({NAME_BYTES} bytes)")
    if len(text.encode()) > PATH_BYTES:
        raise argparse.ArgumentTypeError(f"a path of {len(text.encode())} bytes, longer than the system takes "
                                         f"({PATH_BYTES})")
    return text


def unusable_state_dir(state_dir: Path, e: OSError) -> UsageError:
    """The one-line error of a state directory that cannot be made, entered or written."""
    why = "it is not a directory" if isinstance(e, (FileExistsError, NotADirectoryError)) else e.strerror or e
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return UsageError(f"cannot use {state_dir} as a state directory: {why}",
                          hint="free space on its disk, or give --state-dir a directory on another")
    return UsageError(f"cannot use {state_dir} as a state directory: {why}",
                      hint="give --state-dir a directory this user may create and write")


def run_dirs(state_dir: Path, run_id: str) -> tuple[str, str, str]:
    """A run's folders of logs, checkpoints and results, as absolute paths in text (a job's files are
    `<folder>/<name>`: a job with a `cwd:` of its own finds them too)."""
    base = state_dir.absolute()
    return (str(base / "logs" / run_id), str(base / "checkpoints" / run_id), str(base / "results" / run_id))


def log_path(state_dir: Path, run_id: str, job: str, attempt: int) -> Path:
    """Where the output (stdout and stderr) of one attempt of a job goes."""
    return Path(log_name(run_dirs(state_dir, run_id)[0], job, attempt))


def log_name(logs: str, job: str, attempt: int) -> str:
    """log_path within a run's logs folder (see run_dirs)."""
    return f"{logs}/{job}.{attempt}.log"


def checkpoint_path(state_dir: Path, run_id: str, job: str) -> Path:
    """Where a job keeps its checkpoint token across attempts."""
    return Path(run_dirs(state_dir, run_id)[1], job)


def result_path(state_dir: Path, run_id: str, job: str, attempt: int) -> Path:
    """Where one attempt of a job may write its result (read by conditions of its dependents)."""
    return Path(result_name(run_dirs(state_dir, run_id)[2], job, attempt))


def result_name(results: str, job: str, attempt: int) -> str:
    """result_path within a run's results folder (see run_dirs)."""
    return f"{results}/{job}.{attempt}"


def ids_path(state_dir: Path, run_id: str) -> Path:
    """A run's job ids, one per line in index order: read by `status` instead of the journal."""
    return state_dir / "jobs" / f"{run_id}.ids"


def write_ids(state_dir: Path, run_id: str, ids: list[str]) -> None:
    """Write a run's job id list (atomically: a reader sees the old list or the new one)."""
    path = ids_path(state_dir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(ids) + "\n", encoding="utf-8")
    tmp.replace(path)


def append_ids(state_dir: Path, run_id: str, ids: list[str]) -> None:
    """Add job ids made during the run (loop instances) to the end of the run's id list.

    One write: a reader sees the new lines whole or not at all (read_ids drops a cut last line).
    """
    with open(ids_path(state_dir, run_id), "a", encoding="utf-8") as f:
        f.write("".join(j + "\n" for j in ids))


def read_ids(state_dir: Path, run_id: str) -> list[str] | None:
    """A run's job ids, or None when the list file is missing."""
    try:
        text = ids_path(state_dir, run_id).read_text(encoding="utf-8")
    except OSError:
        return None
    return text.split("\n")[:-1]


def find_id(state_dir: Path, run_id: str, job: str) -> int | None:
    """Index of one job in a run's id list file, found without splitting the list (None: not there, or no file)."""
    try:
        data = ids_path(state_dir, run_id).read_bytes()
    except OSError:
        return None
    key = job.encode() + b"\n"
    if data.startswith(key):
        return 0
    at = data.find(b"\n" + key)
    # Lines before the match: its newline ends the one before it.
    return None if at < 0 else data.count(b"\n", 0, at + 1)


def newest_ids(state_dir: Path) -> list[str]:
    """Job ids of the newest run of a state directory (its newest id list), or [] when it has none."""
    try:
        lists = sorted(state_dir.joinpath("jobs").glob("*.ids"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return []
    if not lists:
        return []
    return read_ids(state_dir, lists[-1].stem) or []


def summary_path(state_dir: Path, run_id: str) -> Path:
    """A stopped run's closing figures (status, counts per state): read by `wloadctl runs` instead of a replay."""
    return state_dir / "jobs" / f"{run_id}.summary.json"


def write_summary(state_dir: Path, run_id: str, summary: dict[str, Any]) -> None:
    """Write a run's closing figures (atomically); on a full disk, none (readers do without: see read_summary)."""
    path = summary_path(state_dir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(summary), encoding="utf-8")
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno != errno.ENOSPC:
            raise
        return
    tmp.replace(path)


def read_summary(state_dir: Path, run_id: str) -> dict[str, Any] | None:
    """A run's closing figures, or None when it has none (live, or it crashed)."""
    try:
        data = json.loads(summary_path(state_dir, run_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


PIPELINE_FILE = "pipeline.json"
"""The live scheduler's pipeline figures (`wloadctl top`), rewritten about once a second."""


def pipeline_path(state_dir: Path) -> Path:
    """Where the live scheduler of a state directory publishes its pipeline figures."""
    return state_dir / PIPELINE_FILE


JOURNAL_NOTE = "journal.url"
"""A server journal's run leaves its URL (without password) in its state directory, which holds no journal."""


def write_journal_note(state_dir: Path, url: str) -> None:
    """Say in the state directory which server journal holds its runs (a reader given the directory alone is
    told where to look). Best effort: a directory that cannot take it loses only that hint."""
    try:
        (state_dir / JOURNAL_NOTE).write_text(url + "\n", encoding="utf-8")
    except OSError:
        pass


def read_journal_note(state_dir: Path) -> str | None:
    """The server journal a state directory's runs were journaled in (None: it says none)."""
    try:
        return (state_dir / JOURNAL_NOTE).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def adopt_journal_of(state_dir: Path) -> None:
    """With no journal given, a state directory whose runs went to a server journal (its journal.url, and no SQLite
    journal of its own) is read and run in that journal, as its runs were: its URL becomes this process's journal
    (and that of the processes it starts). A run in it would otherwise start a SQLite journal beside that one,
    and `status` of the directory then read this new run, not the runs of the server journal."""
    from wloadctl.store import DB_NAME, JOURNAL_ENV, journal_url

    try:
        if journal_url() is not None or (state_dir / DB_NAME).exists():
            return
    except OSError:
        return  # (a directory this user cannot read: the command says so in its one line)
    url = read_journal_note(state_dir)
    if url is not None:
        os.environ[JOURNAL_ENV] = url


STOP_NOTE = "stop.json"
"""Who stops a scheduler with SIGTERM and why, left for it to journal (a signal carries no words)."""


def write_stop_note(state_dir: Path, pid: int, reason: str) -> None:
    """Before SIGTERM to scheduler `pid`: say why it is stopped, for its audit trail (who: the note's owner).
    Best effort: a directory that cannot take it leaves the stop journaled as "stopped by a signal"."""
    try:
        tmp = state_dir / f".{STOP_NOTE}.{os.getpid()}"
        tmp.write_text(json.dumps({"pid": pid, "reason": reason}), encoding="utf-8")
        os.replace(tmp, state_dir / STOP_NOTE)
    except OSError:
        pass


def take_stop_note(state_dir: Path, pid: int) -> tuple[str, str] | None:
    """(user, reason) left for scheduler `pid` by whoever signals it to stop, removed once read; None when none
    was left for this process (a stale note of another scheduler is dropped). The user is the note's owner, by
    the password database: what the note says cannot name another."""
    from wloadctl.ipc.ctlsock import user_name

    path = state_dir / STOP_NOTE
    try:
        owner = path.stat().st_uid
        note = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or note.get("pid") != pid:
        return None
    return user_name(owner), str(note.get("reason", ""))

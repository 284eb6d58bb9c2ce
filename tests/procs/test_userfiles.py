"""A run_as job's own directory: its files come back, and nothing it plants makes the executor read elsewhere.

These run as the test's own user (run_as of oneself takes the same path); the run as another
user, as root, is in tests/integration/test_run_as.py.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from wloadctl.procs.userfiles import CHECKPOINT, RESULT, JobFiles, read_regular, remove_job_dirs

TAG = f"test-{os.getpid()}"
"""The run id in these tests' job directory names."""


@pytest.fixture
def run_files(tmp_path: Path) -> dict[str, str]:
    """A job's environment pointing at the run's result and checkpoint files (a last checkpoint exists)."""
    (tmp_path / "ckpt").write_text("chunk-7\n")
    return {"WLOADCTL_RESULT_FILE": str(tmp_path / "job.1"), "WLOADCTL_CHECKPOINT_FILE": str(tmp_path / "ckpt")}


def me() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def test_the_job_writes_in_its_own_directory_and_the_files_come_back(run_files: dict[str, str]) -> None:
    env = dict(run_files)
    files = JobFiles.make(me(), env, TAG)
    d = Path(files.path)
    assert (d.stat().st_mode & 0o777) == 0o700 and d.stat().st_uid == os.geteuid()
    assert env["WLOADCTL_RESULT_FILE"] == f"{d}/{RESULT}"
    # the job finds its last checkpoint, writes a new one (atomically, by rename) and a result
    assert Path(env["WLOADCTL_CHECKPOINT_FILE"]).read_text() == "chunk-7\n"
    (d / "tmp").write_text("chunk-8")
    (d / "tmp").rename(env["WLOADCTL_CHECKPOINT_FILE"])
    Path(env["WLOADCTL_RESULT_FILE"]).write_text("rows=3")
    files.collect()
    assert Path(run_files["WLOADCTL_RESULT_FILE"]).read_text() == "rows=3"
    assert Path(run_files["WLOADCTL_CHECKPOINT_FILE"]).read_text() == "chunk-8"
    assert not d.exists()


def test_a_removed_checkpoint_is_removed_and_no_result_is_none(run_files: dict[str, str]) -> None:
    env = dict(run_files)
    files = JobFiles.make(me(), env, TAG)
    os.unlink(env["WLOADCTL_CHECKPOINT_FILE"])
    files.collect()
    assert not os.path.exists(run_files["WLOADCTL_CHECKPOINT_FILE"])
    assert not os.path.exists(run_files["WLOADCTL_RESULT_FILE"])


def test_symlinks_fifos_and_hard_links_are_not_read_back(run_files: dict[str, str], tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("password=hunter2")
    env = dict(run_files)
    files = JobFiles.make(me(), env, TAG)
    d = Path(files.path)
    # the job points its result at someone else's file, and its checkpoint at a FIFO nobody writes
    os.symlink(secret, env["WLOADCTL_RESULT_FILE"])
    os.unlink(env["WLOADCTL_CHECKPOINT_FILE"])
    os.mkfifo(env["WLOADCTL_CHECKPOINT_FILE"])
    files.collect()
    assert not os.path.exists(run_files["WLOADCTL_RESULT_FILE"])
    assert not os.path.exists(run_files["WLOADCTL_CHECKPOINT_FILE"])
    assert secret.read_text() == "password=hunter2" and not d.exists()
    # a hard link to a file (which would be another user's when run as root) reads as nothing
    env = dict(run_files)
    files = JobFiles.make(me(), env, TAG)
    os.link(secret, env["WLOADCTL_RESULT_FILE"])
    files.collect()
    assert not os.path.exists(run_files["WLOADCTL_RESULT_FILE"])
    assert secret.read_text() == "password=hunter2"


def test_a_directory_swapped_for_a_symlink_changes_nothing(run_files: dict[str, str], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / RESULT).write_text("forged=1")
    (elsewhere / CHECKPOINT).write_text("keep me")
    env = dict(run_files)
    files = JobFiles.make(me(), env, TAG)
    d = Path(files.path)
    Path(env["WLOADCTL_RESULT_FILE"]).write_text("rows=1")
    # the job moves its directory away and puts a symlink to another directory in its place
    moved = tmp_path / "moved"
    d.rename(moved)
    d.symlink_to(elsewhere)
    try:
        files.collect()
        # the read-back went through the directory that was made, not the symlink
        assert Path(run_files["WLOADCTL_RESULT_FILE"]).read_text() == "rows=1"
        # and the removal emptied only that directory: the other one and the symlink stay
        assert sorted(p.name for p in elsewhere.iterdir()) == [CHECKPOINT, RESULT]
        assert d.is_symlink() and list(moved.iterdir()) == []
    finally:
        d.unlink()


def test_read_regular_is_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100_000)
    assert read_regular(str(big), 10) == b"x" * 10
    assert read_regular(str(tmp_path / "missing")) is None
    assert read_regular(str(tmp_path)) is None


def test_directories_left_by_a_dead_executor_are_removed_with_the_run(run_files: dict[str, str],
                                                                      tmp_path: Path) -> None:
    left = [JobFiles.make(me(), dict(run_files), TAG) for _ in range(2)]
    Path(left[0].path, "sub").mkdir()
    Path(left[0].path, "sub", RESULT).write_text("x")
    bait = Path(left[0].path).parent / f"wloadctl-job.{TAG}.link"
    bait.symlink_to(tmp_path)
    try:
        assert remove_job_dirs(TAG) == 2
        assert not any(Path(f.path).exists() for f in left) and bait.is_symlink() and tmp_path.is_dir()
    finally:
        bait.unlink()
        for f in left:
            f.discard()

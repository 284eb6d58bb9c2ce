"""A `run_as` job's own files: a directory its user owns for its result and checkpoint, read back when it ends.

The run's result and checkpoint folders belong to the user the executor runs as (root, for
`run_as`), and the state directory above them may be closed to everyone else, so a job that
runs as another user could neither reach nor write them. Before such a job starts, the
executor makes a private directory for it (`wloadctl-job.RUN.*` under the executor's temporary
directory, made 0700 and then given to the user), puts the job's last checkpoint there, and points
$WLOADCTL_RESULT_FILE and $WLOADCTL_CHECKPOINT_FILE at it. When the job ends the executor
reads both back into the run's folders, as the job would have written them itself.

What the job may do to that directory cannot make the executor read or write anything else:
it is read through a descriptor held since it was made (renaming it or putting a symlink in
its place changes nothing), each file is opened without following a symlink and read only
if it is a regular file of the job's user with one link, reads are bounded, and the
directory's entries are removed through that same descriptor.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass

from wloadctl.procs.spawning import run_as_user

RESULT = "result"
"""Name of the job's result file in its directory."""
CHECKPOINT = "checkpoint"
"""Name of the job's checkpoint file in its directory."""
READ_LIMIT = 65536
"""Most bytes read back from each file (a result or a checkpoint token is small)."""
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""How a file that someone else may have placed is opened: no symlink followed, never blocking on a FIFO."""


def read_regular(path: str, limit: int = READ_LIMIT, *, dir_fd: int | None = None,
                 owner: int | None = None) -> bytes | None:
    """The first `limit` bytes of a regular file, or None when it is missing or not a plain file.

    Args:
        path: The file (relative to `dir_fd` when given).
        limit: Most bytes read.
        dir_fd: A directory descriptor `path` is relative to.
        owner: When given, a file of another owner, or with more than one link (a hard link
            to someone else's file), reads as None.

    Returns:
        The bytes, or None: no such file, a symlink, a FIFO, a device, a directory, or not `owner`'s.
    """
    try:
        fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if owner is not None and (st.st_uid != owner or st.st_nlink != 1):
            return None
        chunks, left = [], limit
        while left > 0:
            b = os.read(fd, left)
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def replace_file(path: str, data: bytes) -> None:
    """Write `path` whole (a reader sees the old content or the new, never a part)."""
    # A random name beside it (no job's file can be called that), made with O_EXCL by mkstemp.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".wloadctl-", suffix=".tmp")
    try:
        try:
            os.fchmod(fd, 0o644)
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def dir_prefix(tag: str) -> str:
    """The name's start of the job directories of the executors of run `tag`."""
    return f"wloadctl-job.{tag}."


def remove_job_dirs(tag: str) -> int:
    """Remove the job directories executors of run `tag` left (they died with their jobs); how many.

    Only directories (never a symlink of that name) go, removed without following symlinks.
    """
    base = tempfile.gettempdir()
    prefix = dir_prefix(tag)
    gone = 0
    try:
        names = [n for n in os.listdir(base) if n.startswith(prefix)]
    except OSError:
        return 0
    for name in names:
        path = os.path.join(base, name)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path)
                gone += 1
        except OSError:
            pass
    return gone


@dataclass(slots=True)
class JobFiles:
    """The directory of one attempt of a `run_as` job and where its files go back to."""

    path: str
    """The directory, as the job sees it."""
    dfd: int
    """A descriptor of the directory held since it was made: every read and removal goes through it."""
    uid: int
    """The job's user."""
    result_to: str
    """The run's result file of this attempt."""
    checkpoint_to: str
    """The run's checkpoint file of the job."""

    @classmethod
    def make(cls, user: str, env: dict[str, str], tag: str) -> JobFiles:
        """Make the directory of a job that runs as `user` and point its environment at it.

        Args:
            user: The job's `run_as` user.
            env: The job's environment: its WLOADCTL_RESULT_FILE and WLOADCTL_CHECKPOINT_FILE
                (the run's files) are read, and replaced by the files of the new directory.
            tag: The executors' run id, in the directory's name (see `remove_job_dirs`).

        Raises:
            OSError: The user is unknown or one this process may not become, or the directory
                cannot be made or given to them.
        """
        pw = run_as_user(user)
        path = tempfile.mkdtemp(prefix=dir_prefix(tag))
        dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        files = cls(path, dfd, pw.pw_uid, env.get("WLOADCTL_RESULT_FILE", ""),
                    env.get("WLOADCTL_CHECKPOINT_FILE", ""))
        try:
            last = read_regular(files.checkpoint_to) if files.checkpoint_to else None
            if last is not None:
                # Made while the directory is still the executor's: the user cannot race it.
                fd = os.open(CHECKPOINT, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o600, dir_fd=dfd)
                try:
                    os.write(fd, last)
                    os.fchown(fd, pw.pw_uid, pw.pw_gid)
                finally:
                    os.close(fd)
            os.fchown(dfd, pw.pw_uid, pw.pw_gid)
        except OSError:
            files.discard()
            raise
        if files.result_to:
            env["WLOADCTL_RESULT_FILE"] = f"{path}/{RESULT}"
        if files.checkpoint_to:
            env["WLOADCTL_CHECKPOINT_FILE"] = f"{path}/{CHECKPOINT}"
        return files

    def collect(self) -> None:
        """The job ended: copy its result and checkpoint back to the run's files, then remove the directory.

        A checkpoint the job removed is removed from the run's files too (as when the job writes
        the run's file itself). Nothing here raises: a file that cannot be read back counts as
        not written.
        """
        try:
            result = read_regular(RESULT, dir_fd=self.dfd, owner=self.uid)
            if result is not None and self.result_to:
                replace_file(self.result_to, result)
            if self.checkpoint_to:
                ckpt = read_regular(CHECKPOINT, dir_fd=self.dfd, owner=self.uid)
                if ckpt is not None:
                    replace_file(self.checkpoint_to, ckpt)
                else:
                    try:
                        os.unlink(self.checkpoint_to)
                    except FileNotFoundError:
                        pass
        except OSError:
            pass
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the directory and what is in it, through the held descriptor; close it."""
        if self.dfd < 0:
            return
        dfd, self.dfd = self.dfd, -1
        try:
            for name in os.listdir(dfd):
                try:
                    if stat.S_ISDIR(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                        shutil.rmtree(name, dir_fd=dfd)
                    else:
                        os.unlink(name, dir_fd=dfd)
                except OSError:
                    pass
            here = os.fstat(dfd)
            try:
                now = os.stat(self.path, follow_symlinks=False)
            except OSError:
                return
            # Only the directory that was made goes, not whatever the job renamed into its place.
            if (now.st_dev, now.st_ino) == (here.st_dev, here.st_ino):
                os.rmdir(self.path)
        except OSError:
            pass
        finally:
            os.close(dfd)

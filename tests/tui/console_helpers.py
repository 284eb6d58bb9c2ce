"""Console test helpers: screen text, waits, canned apps, real runs that always stop."""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from console_fakes import NOW, FakeClient
from rich.console import Console
from textual import events
from textual.app import App
from textual.pilot import Pilot

from tui.app import ConsoleApp
from tui.supervise import FINISHED, SchedulerSupervisor, lock_holder
from wloadctl.client import RunClient
from wloadctl.errors import WloadError

DATA = Path(__file__).parent / "data"


def screen_text(app: App[Any]) -> str:
    """What the terminal shows now, as plain text."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system=None,
        record=True,
        legacy_windows=False,
    )
    console.print(
        app.screen._compositor.render_update(
            full=True, screen_stack=app._background_screens
        )
    )
    return console.export_text()


async def wait_for(
    pilot: Pilot[Any],
    pred: Callable[[], object],
    timeout: float = 20.0,
    what: str = "condition",
) -> Any:
    """Let the app run until `pred` is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


async def paste(pilot: Pilot[Any], text: str) -> None:
    """Paste `text` into the focused field, as a terminal's bracketed paste does: one event, where typing it
    costs a key press and a wait for the app to go idle per character (about a tenth of a second each)."""
    driver = pilot.app._driver
    assert driver is not None
    driver.send_message(events.Paste(text))
    await pilot.pause()


class StubSupervisor:
    """Stands in for SchedulerSupervisor in canned tests: never starts anything."""

    pid = 4242
    stopped = False

    def describe(self) -> str:
        return "started pid 4242"

    def check(self) -> list[Any]:
        return []

    def stop(self, timeout: float = 30.0, reason: str = "") -> bool:
        self.stopped = True
        return True


def fake_app(
    client: FakeClient | None = None, readonly: bool = False, supervised: bool = False
) -> ConsoleApp:
    """A console over canned data with a frozen clock."""
    fake = client or FakeClient()
    return ConsoleApp(
        fake.state_dir,
        open_client=lambda: fake,
        clock=lambda: NOW,
        readonly=readonly,
        supervisor=cast(Any, StubSupervisor()) if supervised else None,
        poll=0.02,
    )  # type: ignore[arg-type]


async def loaded(pilot: Pilot[Any]) -> None:
    """Wait until the console shows the run."""
    app = pilot.app
    await wait_for(pilot, lambda: app.loaded.is_set(), 10, "the model")  # type: ignore[attr-defined]
    await pilot.pause(0.05)


# -- real runs -----------------------------------------------------------------------


def cmdline(pid: int) -> str:
    """The command line of a process ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (a test's tmp directory)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and text in cmdline(int(name)):
            try:
                with open(f"/proc/{name}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
            except (OSError, IndexError):
                continue
            out.append(int(name))
    return out


class LiveRun:
    """A state directory in tmp_path; a gate file holds its first job until opened."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.state_dir = tmp_path / "state"
        self.gate = tmp_path / "gate"
        self.supervisors: list[SchedulerSupervisor] = []

    def plan(self, name: str = "flow.yaml") -> Path:
        """Copy a plan from tests/tui/data, its gate pointing at this run's gate."""
        text = (DATA / name).read_text().replace("@GATE@", str(self.gate))
        path = self.root / name
        path.write_text(text)
        return path

    def open_gate(self) -> None:
        """Let the gated job finish."""
        self.gate.touch()

    def supervisor(self, plan: Path | None) -> SchedulerSupervisor:
        """A supervisor of this run (kept for teardown)."""
        sup = SchedulerSupervisor(
            self.state_dir, str(plan) if plan else None, executors=2, slots=2
        )
        self.supervisors.append(sup)
        return sup

    def app(
        self, sup: SchedulerSupervisor | None, readonly: bool = False
    ) -> ConsoleApp:
        """A console of this run that looks at the board often (tests wait less)."""
        return ConsoleApp(self.state_dir, supervisor=sup, readonly=readonly, poll=0.05)

    def _run_status(self) -> str:
        try:
            with RunClient(self.state_dir) as client:
                return client.run.status
        except WloadError:
            return ""

    def teardown(self) -> list[int]:
        """Stop every scheduler; return the processes still around (should be none)."""
        self.open_gate()
        # A scheduler whose run just ended is still cleaning up; a SIGTERM then would
        # cut its cleanup short, so let it finish on its own first.
        if self._run_status() in FINISHED:
            holder = lock_holder(self.state_dir)
            deadline = time.monotonic() + 15
            while holder is not None and time.monotonic() < deadline:
                time.sleep(0.05)
                holder = lock_holder(self.state_dir)
        for sup in self.supervisors:
            sup.stop(timeout=20)
            sup.reap()
        deadline = time.monotonic() + 15
        left = processes_mentioning(str(self.root))
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = processes_mentioning(str(self.root))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for sup in self.supervisors:
            for proc in sup._reaped + sup.children():
                proc.wait(5)
        return left


def ipc_objects_of(state_dir: Path) -> list[str]:
    """Queues and segments named after the run of `state_dir` that still exist."""
    try:
        with RunClient(state_dir) as client:
            run_id = client.run.run_id
    except WloadError:
        return []
    found = []
    for d in ("/dev/mqueue", "/dev/shm"):
        try:
            found += [f"{d}/{n}" for n in os.listdir(d) if run_id in n]
        except OSError:
            pass
    return found

"""The console's approvals screen on canned data: requests and confirmation jobs listed, approve and reject sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console_fakes import T0, FakeClient
from console_helpers import fake_app, loaded, screen_text, wait_for
from textual.geometry import Spacing
from textual.widgets import DataTable
from textual.widgets._toast import Toast

from tui.screens.main import MainScreen
from tui.screens.pending import PendingScreen


@dataclass
class ApprovalsClient(FakeClient):
    """A fake run with one request for a second person and one job waiting for confirmation."""

    requests: list[dict[str, Any]] = field(default_factory=lambda: [
        {"id": "R1", "verb": "kill", "jobs": ["load_gl"], "user": "bob", "reason": "stuck on a lock",
         "ts": T0 + 600, "downstream": False}])
    confirm: list[str] = field(default_factory=lambda: ["post_eod"])

    def pending(self) -> dict[str, Any]:
        return {"run": self.run.run_id, "requests": list(self.requests), "confirm": list(self.confirm)}

    def control(self, verb: str, jobs: list[str], reason: str = "", downstream: bool = False) -> dict[str, Any]:
        self.sent.append((verb, list(jobs), reason, downstream))
        if verb == "approve" and jobs == ["R1"]:
            self.requests = []
            return {"ok": True, "verb": "kill", "results": [["load_gl", True, "job 'load_gl' is being killed"]],
                    "approved": "R1", "live": True}
        if verb == "approve":
            self.confirm = [j for j in self.confirm if j not in jobs]
            return {"ok": True, "verb": verb, "results": [[jobs[0], True, f"job '{jobs[0]}' confirmed, now READY"]],
                    "live": True}
        return {"ok": False, "error": "unexpected", "live": True}


async def test_the_approvals_screen_lists_what_waits_and_approves_the_row_under_the_cursor() -> None:
    client = ApprovalsClient()
    app = fake_app(client)
    async with app.run_test(size=(130, 30)) as pilot:
        await loaded(pilot)
        # The header says how many wait
        await wait_for(pilot, lambda: "2 wait for approve (A)" in screen_text(app), what="the header's hint")
        # When the operator opens the approvals screen
        await pilot.press("A")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PendingScreen) and app.screen.keys
                                and app.screen, what="the approvals screen")
        # Then the request and the confirmation job are listed
        assert screen.keys == ["R1", "post_eod"]
        text = screen_text(app)
        assert "kill" in text and "load_gl" in text and "bob" in text and "stuck on a lock" in text
        assert "confirm" in text and "post_eod" in text
        # Reject does not apply to a confirmation job
        screen.query_one(DataTable).move_cursor(row=1)
        await pilot.press("r")
        await pilot.pause(0.1)
        assert client.sent == []
        # When the operator approves the request under the cursor
        screen.query_one(DataTable).move_cursor(row=0)
        await pilot.press("a", "y")
        await wait_for(pilot, lambda: client.sent and screen.keys == ["post_eod"], what="R1 approved")
        assert client.sent[0][:2] == ("approve", ["R1"])
        assert any("approve R1: job 'load_gl' is being killed" in n.text for n in app.notes)
        # And the confirmation job next
        await pilot.press("a", "y")
        await wait_for(pilot, lambda: screen.keys == [], what="post_eod confirmed")
        assert client.sent[1][:2] == ("approve", ["post_eod"])
        assert "nothing waits for approve" in screen_text(app)
        # Escape returns to the jobs, and the hint goes
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), what="the main screen")
        await wait_for(pilot, lambda: "wait for approve" not in screen_text(app), what="no hint")


async def test_a_read_only_console_lists_but_does_not_approve() -> None:
    client = ApprovalsClient()
    app = fake_app(client, readonly=True)
    async with app.run_test(size=(130, 30)) as pilot:
        await loaded(pilot)
        await pilot.press("A")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PendingScreen) and app.screen.keys
                                and app.screen, what="the approvals screen")
        await pilot.press("a")
        await pilot.pause(0.1)
        assert client.sent == [] and screen.keys == ["R1", "post_eod"]


async def test_the_approvals_screen_says_nothing_waits_when_nothing_does_from_its_first_reading() -> None:
    client = ApprovalsClient(requests=[], confirm=[])
    app = fake_app(client)
    async with app.run_test(size=(100, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("A")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PendingScreen) and app.screen.data is not None
                                and app.screen, what="the approvals screen's first reading")
        await pilot.pause()
        assert screen.keys == []
        assert "nothing waits for approve" in screen_text(app)
        assert "waiting for approve" not in screen_text(app)


async def test_a_toast_on_the_approvals_screen_stands_inside_its_table_clear_of_the_note() -> None:
    client = ApprovalsClient()
    app = fake_app(client)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await loaded(pilot)
        await pilot.press("A")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, PendingScreen) and app.screen.keys
                                and app.screen, what="the approvals screen")
        app.notify("approve post_eod: job 'post_eod' confirmed, now READY", timeout=30)
        toast = await wait_for(pilot, lambda: (t := list(screen.query(Toast))) and t[0].region and t[0].region,
                               5, "the toast")
        note = screen.query_one("#pending-note").region
        table = screen.query_one(DataTable).region
        assert not toast.overlaps(note), (toast, note, screen_text(app))
        assert table.shrink(Spacing(1, 1, 1, 1)).contains_region(toast), (toast, table)
        assert "by any admin" in screen_text(app)

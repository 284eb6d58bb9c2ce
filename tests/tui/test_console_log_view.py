"""The job detail's log view of a big log: what is left out is said, and the view starts at a line."""

from __future__ import annotations

from pathlib import Path

from console_fakes import FakeClient
from console_helpers import fake_app, loaded, wait_for
from textual.widgets import Log

from tui.screens.job_detail import JobDetailScreen
from tui.widgets.job_table import JobTable


async def test_the_log_of_a_6_mb_job_says_what_was_left_out_and_starts_at_a_line(tmp_path: Path) -> None:
    # Given a job that printed 6 MB of numbered lines of 61 bytes
    fake = FakeClient(state_dir=tmp_path)
    path = fake.log_file("load_fx_rates", 2)
    path.parent.mkdir(parents=True)
    line_count = 6 * 1024 * 1024 // 61
    path.write_bytes(b"".join(b"line %07d " % n + b"x" * 47 + b"\n" for n in range(line_count)))
    app = fake_app(fake)
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot)
        # When its detail is opened
        app.screen.query_one(JobTable).select_job("load_fx_rates")
        await pilot.press("enter")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen) and app.screen._log_pos
                                and app.screen, what="the log")
        lines = screen.query_one("#log", Log).lines
        # Then the first line says how much was left out and where it all is
        assert lines[0].startswith("[... ") and "MB of earlier output left out" in lines[0], lines[0]
        assert "`wloadctl logs load_fx_rates` has it all" in lines[0]
        # And every other line is whole, up to the log's last
        assert all(ln.startswith("line ") and len(ln) == 60 for ln in lines[1:] if ln), lines[1:3]
        assert lines[-1] == "" or lines[-1].startswith(f"line {line_count - 1:07d}")
        shown = [ln for ln in lines[1:] if ln]
        assert shown[-1].startswith(f"line {line_count - 1:07d}")
        left = int(shown[0].split()[1])
        assert f"{left * 61 / 1024 / 1024:.1f} MB" in lines[0]

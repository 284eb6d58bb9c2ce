"""Visual regressions on canned data: fixed size, frozen clock, UTC; class a screen."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from console_fakes import FakeClient
from console_helpers import fake_app, loaded, wait_for
from textual.pilot import Pilot

from tui.screens.confirm import ConfirmScreen
from tui.screens.help import HelpScreen
from tui.screens.job_detail import JobDetailScreen
from tui.screens.quit import QuitScreen
from tui.widgets.job_table import JobTable

pytestmark = pytest.mark.snapshot
Compare = Callable[..., bool]


def before(
    keys: Iterable[str] = (),
    job: str | None = None,
    until: Callable[[Any], bool] | None = None,
) -> Callable[[Pilot[Any]], Any]:
    """A run_before: wait for the run, put the cursor on `job`, press keys, wait."""

    async def run(pilot: Pilot[Any]) -> None:
        await loaded(pilot)
        if job is not None:
            pilot.app.screen.query_one(JobTable).select_job(job)
        await pilot.press(*keys)
        if until is not None:
            await wait_for(pilot, lambda: until(pilot.app), what="the screen")
        await pilot.pause(0.2)

    return run


class TestMainScreen:
    """The dashboard."""

    def test_wide(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(), terminal_size=(160, 44), run_before=before(job="load_gl")
        )

    def test_80x24_dag_pane(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(), terminal_size=(80, 24), run_before=before(job="load_gl")
        )

    def test_80x24_nodes_pane(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(supervised=True), terminal_size=(80, 24), run_before=before(["2"])
        )

    def test_80x24_sla_pane(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(), terminal_size=(80, 24), run_before=before(["3"])
        )

    def test_no_color(
        self, snap_compare: Compare, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("NO_COLOR", "1")
        assert snap_compare(
            fake_app(), terminal_size=(100, 30), run_before=before(["j", "j"])
        )

    def test_trouble_filter_sorted_by_state(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(),
            terminal_size=(120, 30),
            run_before=before(["exclamation_mark", "S", "S"]),
        )


class TestConfirmScreen:
    """The impact dialog."""

    def test_rerun_with_downstream(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(),
            terminal_size=(100, 30),
            run_before=before(
                ["R", "d"],
                job="extract_fx",
                until=lambda app: isinstance(app.screen, ConfirmScreen),
            ),
        )

    def test_kill_is_destructive(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(),
            terminal_size=(80, 24),
            run_before=before(
                ["x"],
                job="load_gl",
                until=lambda app: isinstance(app.screen, ConfirmScreen),
            ),
        )


class TestJobDetailScreen:
    """One job with its log."""

    def test_failed_job(self, snap_compare: Compare, tmp_path: Path) -> None:
        fake = FakeClient(state_dir=tmp_path)
        log = fake.log_file("load_fx_rates", 2)
        log.parent.mkdir(parents=True)
        log.write_text(
            "fetching rates from ECB\nHTTP 503 from upstream\ngiving up after 3 tries\n"
        )

        def ready(app: Any) -> bool:
            s = app.screen
            return (
                isinstance(s, JobDetailScreen) and s.why is not None and s._log_pos > 0
            )

        assert snap_compare(
            fake_app(fake),
            terminal_size=(100, 30),
            run_before=before(["enter"], job="load_fx_rates", until=ready),
        )


class TestHelpScreen:
    """Keys and legend."""

    def test_help(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(),
            terminal_size=(100, 40),
            run_before=before(
                ["question_mark"], until=lambda app: isinstance(app.screen, HelpScreen)
            ),
        )


class TestQuitScreen:
    """Leaving a live run."""

    def test_detach_or_stop(self, snap_compare: Compare) -> None:
        assert snap_compare(
            fake_app(supervised=True),
            terminal_size=(80, 24),
            run_before=before(
                ["q"], until=lambda app: isinstance(app.screen, QuitScreen)
            ),
        )

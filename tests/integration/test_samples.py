"""The samples run clean, whatever the business date and the hour they start at."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tests.integration.helpers import cli, status

pytestmark = pytest.mark.ipc

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


@pytest.mark.parametrize("business_date", [None, "2024-03-29"])
def test_bank_sample_succeeds_with_no_job_late_or_at_risk(
        tmp_path: Path, no_ipc_leaks: None, business_date: str | None) -> None:
    sd = tmp_path / "sd"
    extra = ["--business-date", business_date] if business_date else []
    started = dt.datetime.now()
    p = cli("run", str(SAMPLES / "eod_bank.yaml"), "--state-dir", str(sd), "--quiet", *extra, timeout=300)
    assert p.returncode == 0, p.stderr
    st = status(sd)
    assert st["status"] == "succeeded"
    # A run started in the half hour before one of the sample's clock deadlines (19:00, 23:30,
    # 23:59) is rightly AT_RISK for that job (not finished 5 minutes before it); never LATE.
    near = any(0 <= (started.replace(hour=h, minute=m, second=0) - started).total_seconds() <= 1800
               for h, m in ((19, 0), (23, 30), (23, 59)))
    flags = st["flags"]
    if near:
        assert all(v == "AT_RISK" for v in flags.values()), flags
    else:
        assert flags == {}
        assert not (sd / "alerts.log").exists()


def test_the_tutorial_runs_to_its_end_at_any_hour(tmp_path: Path, no_ipc_leaks: None) -> None:
    # Its first job is not before 00:00 of the business date, reached whenever the run starts
    sd = tmp_path / "sd"
    p = cli("run", str(SAMPLES / "tutorial.yaml"), "--state-dir", str(sd), "--quiet", timeout=120)
    assert p.returncode == 0, p.stderr
    st = status(sd)
    assert st["status"] == "succeeded"
    states = {j["job"]: j["state"] for j in st["jobs"]}
    assert states["open_day"] == "SUCCEEDED" and states["close_day"] == "SUCCEEDED", states

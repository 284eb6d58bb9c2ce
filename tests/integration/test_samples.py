"""The bank sample runs clean, whatever the business date and the hour it starts at."""

from __future__ import annotations

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
    p = cli("run", str(SAMPLES / "eod_bank.yaml"), "--state-dir", str(sd), "--quiet", *extra, timeout=300)
    assert p.returncode == 0, p.stderr
    st = status(sd)
    assert st["status"] == "succeeded" and st["flags"] == {}
    assert not (sd / "alerts.log").exists()

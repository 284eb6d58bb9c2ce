"""`wloadctl bench --only console`: the console attaching to a finished run, beside `status` and the old attach."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wloadctl.bench.context import QUICK
from wloadctl.bench.suite import main


@pytest.mark.ipc
def test_console_section_measures_attach_memory_and_keys_beside_status_and_the_plan(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    assert main(["--quick", "--quiet", "--only", "console", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    figs = {f["key"]: f for f in data["figures"]}
    jobs = QUICK.big
    now = figs[f"console/attach (run's shape)/wloadctl/bank/{jobs}"]
    was = figs[f"console/attach (parsing the plan, as before)/wloadctl/bank/{jobs}"]
    assert figs[f"console/status --json (command)/wloadctl/bank/{jobs}"]["seconds"] > 0
    rows = figs[f"console/attach (sorts reading every row, as before)/wloadctl/bank/{jobs}"]
    assert now["extra"]["sort: duration ms"] > 0 and now["extra"]["sort: executor ms"] > 0
    for f in (now, was, rows):
        assert f["seconds"] > 0 and f["extra"]["rss_mib"] > 0 and f["extra"]["slowest key ms"] > 0, f
        assert not f["note"], f["note"]
    assert now["extra"]["app_seconds"] > 0 and now["extra"]["rss_keys_mib"] > 0
    # And the console targets are listed (judged at the full size only)
    assert [t["label"] for t in data["targets"] if t["label"].startswith("k")] == ["k1", "k2", "k3", "k4"]
    names = {r["name"] for r in data["ratios"]}
    for what in ("attach / status --json command", "attach from the shape / from the plan",
                 "memory from the shape / from the plan", "slowest key from the shape / from the plan",
                 "first sort by start, flat rows / every row", "memory after every sort, flat rows / every row"):
        assert f"console {jobs}: {what}" in names
    assert data["cleanup"]["leftovers"] == [] and data["cleanup"]["scratch_removed"]

"""Scraping a wloadctl process's /metrics the way Prometheus reads it, checking every family's name."""

from __future__ import annotations

import re
import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"^wloadctl_[a-z][a-z0-9_]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """sample name -> {sorted labels: value} of one scrape, after checking every family's name."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        assert NAME.match(fam.name), fam.name
        assert fam.type in ("gauge", "counter", "histogram"), (fam.name, fam.type)
        if fam.type == "histogram":
            assert fam.name.endswith("_seconds"), fam.name  # base unit in the name
        for s in fam.samples:
            assert all(LABEL.match(k) and not k.startswith("__") for k in s.labels), s
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out

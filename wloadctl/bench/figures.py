"""Benchmark figures and ratios: medians over repeats, consistent by construction."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Section = Literal["engine", "e2e", "postgres", "shell", "latency", "memory", "reads", "console", "workflows", "dask",
                  "remote"]
"""The parts of the suite, in the order they run (`--only` takes these names)."""

SECTIONS: tuple[Section, ...] = (
    "engine", "e2e", "postgres", "shell", "latency", "memory", "reads", "console", "workflows", "dask", "remote")
"""Every section name."""

Extra = float | int | str | bool | None
"""A value beside a figure's seconds (peak memory, rounds, percentiles, notes)."""


@dataclass
class Figure:
    """One measured quantity: the median of its repeats, with every sample kept."""

    section: Section
    """Which part of the suite measured it."""
    name: str
    """What was measured, e.g. `simulated run`."""
    tool: str
    """Who did the work: `wloadctl`, `counter loop`, `ninja -j2`, ..."""
    shape: str
    """DAG shape of the plan (`bank`, `wide`, `chain`)."""
    jobs: int
    """Jobs in the plan."""
    seconds: float | None
    """Median seconds of the repeats (None when the measurement could not finish)."""
    jobs_per_s: float | None
    """jobs / seconds, from the same median."""
    basis: str
    """What the seconds cover (run wall, whole command, a phase of a process)."""
    samples: list[float] = field(default_factory=list)
    """Seconds of every repeat."""
    extra: dict[str, Extra] = field(default_factory=dict)
    """Further figures of the same measurement (medians of numbers over repeats)."""
    note: str = ""
    """Anything a reader must know: capped, estimated, failed, out of memory."""

    @property
    def key(self) -> str:
        """Unique name of the figure in a report (ratios and targets refer to it)."""
        return f"{self.section}/{self.name}/{self.tool}/{self.shape}/{self.jobs}"


@dataclass
class Ratio:
    """A comparison of two figures of the same run."""

    name: str
    """What it compares, in words."""
    value: float
    """numerator / denominator."""
    numerator: str
    """Figure key of the numerator."""
    denominator: str
    """Figure key of the denominator."""
    of: str
    """Field of the numerator compared (`jobs_per_s`, `seconds`, an `extra` key)."""
    den_of: str
    """Which field of the denominator is compared."""


@dataclass
class Target:
    """One of the issue's targets, and whether this run met it."""

    label: str
    """Short id, e.g. `a1`."""
    text: str
    """The target in words."""
    figure: str
    """Key of the figure (or ratio name) it is judged on."""
    value: float | None
    """The measured value it is judged on."""
    unit: str
    """Unit of `value`."""
    met: bool | None
    """True/False; None when not measured at the target's size in this run."""


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    return float(statistics.median(values))


def combine(
    section: Section,
    name: str,
    tool: str,
    shape: str,
    jobs: int,
    runs: Sequence[dict[str, Extra]],
    basis: str,
    note: str = "",
) -> Figure:
    """Make one figure from the repeats of a measurement.

    Args:
        section: suite section.
        name: what was measured.
        tool: who did the work.
        shape: DAG shape.
        jobs: jobs in the plan.
        runs: one dict per repeat; `seconds` (float or None) is the timed
            quantity, every other numeric key is reported as its median.
        basis: what the seconds cover.
        note: a remark for readers; notes of the repeats are appended.

    Returns:
        The figure, with jobs/s computed from the median seconds.
    """
    secs = [float(s) for r in runs if isinstance(s := r.get("seconds"), (int, float))]
    seconds = median(secs) if secs and len(secs) == len(runs) else None
    extra: dict[str, Extra] = {}
    keys = [k for r in runs for k in r if k not in ("seconds", "note")]
    for k in dict.fromkeys(keys):
        vals = [r.get(k) for r in runs]
        nums = [
            v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        if nums and len(nums) == len(vals):
            m = median(nums)
            extra[k] = (
                int(m) if all(isinstance(v, int) for v in nums) and m == int(m) else m
            )
        else:
            extra[k] = next((v for v in vals if v is not None), None)
    notes = [str(r["note"]) for r in runs if r.get("note")]
    text = "; ".join(dict.fromkeys([note, *notes] if note else notes))
    per_s = jobs / seconds if seconds else None
    return Figure(
        section, name, tool, shape, jobs, seconds, per_s, basis, secs, extra, text
    )


def ratio(
    name: str,
    num: Figure | None,
    den: Figure | None,
    of: str = "jobs_per_s",
    den_of: str | None = None,
) -> Ratio | None:
    """num.<of> / den.<den_of>, or None when either side is missing or zero.

    Args:
        name: what the ratio says.
        num: numerator figure.
        den: denominator figure.
        of: `jobs_per_s`, `seconds`, or a key of `extra`, of the numerator.
        den_of: the same for the denominator (default: `of`).

    Returns:
        The ratio, or None.
    """
    if num is None or den is None:
        return None
    den_of = den_of or of
    a, b = field_of(num, of), field_of(den, den_of)
    if a is None or b is None or b == 0:
        return None
    return Ratio(name, a / b, num.key, den.key, of, den_of)


def field_of(fig: Figure, of: str) -> float | None:
    """A numeric field of a figure: `seconds`, `jobs_per_s` or an `extra` key."""
    v: Any = getattr(fig, of) if of in ("seconds", "jobs_per_s") else fig.extra.get(of)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def as_json(
    figures: list[Figure], ratios: list[Ratio], targets: list[Target]
) -> dict[str, Any]:
    """The figures, ratios and targets as plain JSON-ready data."""
    figs = []
    for f in figures:
        d = asdict(f)
        d["key"] = f.key
        figs.append(d)
    return {
        "figures": figs,
        "ratios": [asdict(r) for r in ratios],
        "targets": [asdict(t) for t in targets],
    }

"""Textual-free layout of the DAG around a job: columns by distance, ASCII edges."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tui.view_model import SHORT, clip
from wloadctl.core.dag import Dag
from wloadctl.core.states import FAIL_STATES, JobState

GUTTER = 5
"""Columns between two levels: a stub, two lanes for vertical runs, a stub, an arrow."""


@dataclass(frozen=True)
class Cell:
    """One node as placed on the grid."""

    job: str
    """Job id ("" for a `+N more` line)."""
    column: int
    """Signed distance from the centre: negative upstream."""
    row: int
    """Line within the column."""
    more: int = 0
    """For a `+N more` line: how many jobs it stands for."""


@dataclass
class DagLayout:
    """Where each job of a neighbourhood goes, and which edges join adjacent columns."""

    centre: str
    """The selected job."""
    columns: list[int]
    """Signed distances shown, left to right."""
    cells: list[Cell] = field(default_factory=list)
    """Every placed node and `+N more` line."""
    edges: list[tuple[str, str]] = field(default_factory=list)
    """(upstream, downstream) pairs between adjacent columns."""
    more_up: bool = False
    """Some job has upstream beyond the shown levels."""
    more_down: bool = False
    """Some job has downstream beyond the shown levels."""

    @property
    def height(self) -> int:
        """Lines needed by the tallest column."""
        return max((c.row for c in self.cells), default=-1) + 1


def layout(
    dag: Dag,
    centre: str,
    up: int,
    down: int,
    max_rows: int,
    important: Callable[[str], bool] | None = None,
) -> DagLayout:
    """Place the jobs within `up` levels above and `down` below `centre` on a grid.

    Columns are distances from the centre, so every edge drawn joins neighbouring
    columns. Within a column nodes follow the mean position of the nodes they connect
    to in the column nearer the centre (the barycentre heuristic), which keeps most
    edges short and uncrossed. A column taller than `max_rows` keeps the jobs for which
    `important` is true first and ends with a `+N more` line.

    Args:
        dag: the plan's graph.
        centre: the selected job.
        up: upstream levels to show.
        down: downstream levels to show.
        max_rows: lines available.
        important: which jobs to keep first when a column is cut (failed, critical).

    Returns:
        The layout.
    """
    near = dag.neighborhood(centre, up, down)
    by_col: dict[int, list[str]] = {}
    for job, d in near.items():
        by_col.setdefault(d, []).append(job)
    cols = sorted(by_col)
    lay = DagLayout(centre, cols)
    pos: dict[str, float] = {centre: 0.0}
    placed: dict[int, list[str]] = {0: [centre]}
    # Walk outward from the centre so each column is ordered by the one nearer it.
    for d in [c for c in cols if c > 0] + [
        c for c in sorted(cols, reverse=True) if c < 0
    ]:
        inner = d - 1 if d > 0 else d + 1
        jobs = by_col[d]

        def bary(job: str, d: int = d, inner: int = inner) -> float:
            links = dag.upstream_of(job) if d > 0 else dag.downstream_of(job)
            ps = [pos[j] for j in links if j in pos and near.get(j) == inner]
            return sum(ps) / len(ps) if ps else 1e9

        jobs.sort(key=lambda j: (bary(j), j))
        if len(jobs) > max_rows:
            keep_n = max(1, max_rows - 1)
            first = [j for j in jobs if important and important(j)]
            rest = [j for j in jobs if not (important and important(j))]
            kept = set((first + rest)[:keep_n])
            shown = [j for j in jobs if j in kept]
            placed[d] = shown
            lay.cells.append(Cell("", d, keep_n, more=len(jobs) - keep_n))
        else:
            placed[d] = jobs
        for r, j in enumerate(placed[d]):
            pos[j] = float(r)
    # The centre sits level with its neighbours' middle, which reads better than row 0.
    sides = [len(placed.get(-1, [])), len(placed.get(1, []))]
    centre_row = max(0, (max(sides) - 1) // 2)
    pos[centre] = float(centre_row)
    for d, jobs in placed.items():
        for r, j in enumerate(jobs):
            lay.cells.append(Cell(j, d, centre_row if d == 0 else r))
    shown_set = {c.job for c in lay.cells if c.job}
    for u, v in dag.edges_among(shown_set):
        if near[v] == near[u] + 1:
            lay.edges.append((u, v))
    # Whole ancestor sets can be most of a large plan: look one step past the edge only.
    lay.more_up = (
        any(dag.upstream_of(j) for j in by_col.get(-up, []))
        if up
        else bool(dag.upstream_of(centre))
    )
    lay.more_down = (
        any(dag.downstream_of(j) for j in by_col.get(down, []))
        if down
        else bool(dag.downstream_of(centre))
    )
    return lay


@dataclass(frozen=True)
class Span:
    """A run of text on a rendered line, with what it stands for (for colouring)."""

    text: str
    """The characters."""
    state: JobState | None = None
    """The state it shows, if it is a state label."""
    role: str = ""
    """"centre", "critical", "edge", "more" or ""."""


def render(
    lay: DagLayout,
    width: int,
    state_of: Callable[[str], JobState],
    critical: Callable[[str], bool],
) -> list[list[Span]]:
    """Draw a layout as lines of spans, ASCII only.

    A node reads `FAIL load_fx*`: its state label, its id, and `*` when it is on the
    run's critical path; the selected job is framed `[...]`.

    Args:
        lay: the layout.
        width: columns available.
        state_of: each job's current state.
        critical: whether a job is on the critical path.

    Returns:
        One list of spans per line.
    """
    ncols = len(lay.columns)
    colw = max(8, (width - GUTTER * (ncols - 1)) // max(1, ncols))
    height = max(1, lay.height)
    grid: list[list[Span]] = [[] for _ in range(height)]
    cursor = [0] * height  # characters written on each line so far
    where = {c.job: c for c in lay.cells if c.job}
    col_x = {d: k * (colw + GUTTER) for k, d in enumerate(lay.columns)}

    def put(row: int, x: int, span: Span) -> None:
        if x > cursor[row]:
            grid[row].append(Span(" " * (x - cursor[row])))
            cursor[row] = x
        grid[row].append(span)
        cursor[row] += len(span.text)

    # Lay the gutters out first as character grids, then merge them in column order.
    gutters: dict[int, list[list[str]]] = {}
    for k, d in enumerate(lay.columns[:-1]):
        g = [[" "] * GUTTER for _ in range(height)]
        nxt = lay.columns[k + 1]
        targets: dict[str, list[int]] = {}
        for u, v in lay.edges:
            if where[u].column == d and where[v].column == nxt:
                targets.setdefault(v, []).append(where[u].row)
        for t, (v, src_rows) in enumerate(
            sorted(targets.items(), key=lambda kv: where[kv[0]].row)
        ):
            lane = 1 + t % 2
            rv = where[v].row
            lo, hi = min([*src_rows, rv]), max([*src_rows, rv])
            for r in range(lo, hi + 1):
                g[r][lane] = "+" if g[r][lane] == "-" else "|"
            for r in src_rows:
                for x in range(0, lane):
                    g[r][x] = "+" if g[r][x] == "|" else "-"
                g[r][lane] = "+" if hi > lo else "-"
            for x in range(lane + 1, GUTTER - 1):
                g[rv][x] = "+" if g[rv][x] == "|" else "-"
            g[rv][lane] = "+" if hi > lo else "-"
            g[rv][GUTTER - 1] = ">"
        gutters[d] = g
    for d in lay.columns:
        x0 = col_x[d]
        for c in (c for c in lay.cells if c.column == d):
            if not c.job:
                put(c.row, x0, Span(clip(f"  +{c.more} more", colw), role="more"))
                continue
            st = state_of(c.job)
            label = SHORT[st]
            star = "*" if critical(c.job) else ""
            if c.job == lay.centre:
                name = clip(c.job, colw - len(label) - 3 - len(star))
                put(c.row, x0, Span("[", role="centre"))
                put(c.row, x0 + 1, Span(label, st))
                put(c.row, x0 + 1 + len(label), Span(f" {name}{star}]", role="centre"))
            else:
                name = clip(c.job, colw - len(label) - 1 - len(star))
                put(c.row, x0, Span(label, st))
                put(
                    c.row,
                    x0 + len(label),
                    Span(f" {name}", role="critical" if star else ""),
                )
                if star:
                    put(
                        c.row,
                        x0 + len(label) + 1 + len(name),
                        Span("*", role="critical"),
                    )
        if d in gutters:
            for r, chars in enumerate(gutters[d]):
                text = "".join(chars)
                if text.strip():
                    put(r, x0 + colw, Span(text, role="edge"))
    return grid


def important_job(
    state_of: Callable[[str], JobState], critical: Callable[[str], bool]
) -> Callable[[str], bool]:
    """The jobs a cut column keeps first: broken ones and those on the critical path."""
    bad = {int(s) for s in FAIL_STATES} | {JobState.HELD}
    return lambda j: state_of(j) in bad or critical(j)

"""Textual-free layout of the DAG around a job: columns by distance, ASCII edges."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tui.labels import SHORT, clip, distinct_ids
from wloadctl.core.dag import Dag
from wloadctl.core.states import FAIL_STATES, JobState

GUTTER = 5
"""Columns between two levels: a stub, three lanes for vertical runs, an arrow head."""
WALK_CAP = 400
"""Jobs kept per level of the walk around the centre: a hub's many thousands of dependents are
counted, and only these (the important ones first) are laid out and walked on from."""
IMPORTANT_SCAN = 5000
"""Jobs of a level looked at for important ones when the level is cut."""


def near_jobs(
    dag: Dag,
    centre: str,
    up: int,
    down: int,
    keep: int = WALK_CAP,
    important: Callable[[str], bool] | None = None,
) -> tuple[dict[str, int], dict[int, int]]:
    """The jobs within `up` levels above and `down` below `centre`, at most `keep` per level.

    Returns:
        (job -> signed distance, as Dag.neighborhood gives it, of the jobs kept; the number of
        jobs at each distance, kept or not). A level beyond a cut one holds the jobs reachable
        from the kept ones.
    """
    ids = dag.ids
    c = dag.index[centre]
    near: dict[int, int] = {c: 0}
    totals = {0: 1}
    for sign, depth in ((-1, up), (1, down)):
        off, flat = dag.rows(sign > 0)
        frontier = [c]
        for step in range(1, depth + 1):
            nxt: dict[int, None] = {}
            for v in frontier:
                for u in flat[off[v] : off[v + 1]]:
                    if u not in near:
                        nxt[u] = None
            if not nxt:
                break
            level = list(nxt)
            totals[sign * step] = len(level)
            if len(level) > keep:
                first = [u for u in level[:IMPORTANT_SCAN] if important(ids[u])] if important else []
                chosen = set(first[:keep])
                level = first[:keep] + [u for u in level if u not in chosen][: keep - len(chosen)]
            for u in level:
                near[u] = sign * step
            frontier = level
    return {ids[i]: d for i, d in near.items()}, totals


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
    near, totals = near_jobs(dag, centre, up, down, max(WALK_CAP, max_rows), important)
    by_col: dict[int, list[str]] = {}
    for job, d in near.items():
        by_col.setdefault(d, []).append(job)
    cols = sorted(by_col)
    lay = DagLayout(centre, cols)
    pos: dict[str, float] = {centre: 0.0}
    placed: dict[int, list[str]] = {0: [centre]}
    more: dict[int, int] = {}
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
            more[d] = totals[d] - keep_n
        else:
            placed[d] = jobs
        for r, j in enumerate(placed[d]):
            pos[j] = float(r)
    # Then inward: each column follows the column further out, so siblings that feed
    # the same job sit together and their edges do not cross.
    for d in [c for c in sorted(cols, reverse=True) if 0 < c < max(cols)] + [
        c for c in cols if min(cols) < c < 0
    ]:
        outer = d + 1 if d > 0 else d - 1
        opos = {j: float(r) for r, j in enumerate(placed[outer])}

        def outward(job: str, d: int = d, opos: dict[str, float] = opos) -> float:
            links = dag.downstream_of(job) if d > 0 else dag.upstream_of(job)
            ps = [opos[j] for j in links if j in opos]
            return sum(ps) / len(ps) if ps else 1e9

        placed[d].sort(key=lambda j: (outward(j), pos[j]))
        for r, j in enumerate(placed[d]):
            pos[j] = float(r)
    # And outward once more, so the outer columns follow the reordered inner ones.
    for d in [c for c in cols if c > 1] + [
        c for c in sorted(cols, reverse=True) if c < -1
    ]:
        inner = d - 1 if d > 0 else d + 1
        ipos = {j: float(r) for r, j in enumerate(placed[inner])}

        def inward(job: str, d: int = d, ipos: dict[str, float] = ipos) -> float:
            links = dag.upstream_of(job) if d > 0 else dag.downstream_of(job)
            ps = [ipos[j] for j in links if j in ipos]
            return sum(ps) / len(ps) if ps else 1e9

        placed[d].sort(key=lambda j: (inward(j), pos[j]))
        for r, j in enumerate(placed[d]):
            pos[j] = float(r)
    # The centre sits level with its neighbours' middle, which reads better than row 0.
    sides = [len(placed.get(-1, [])), len(placed.get(1, []))]
    row: dict[str, int] = {centre: max(0, (max(sides) - 1) // 2)}
    for d in (-1, 1):
        row.update((j, r) for r, j in enumerate(placed.get(d, [])))
    # Further out, a job sits level with the jobs it links to when there is room, so
    # most edges run straight across.
    for d in [c for c in cols if c > 1] + [
        c for c in sorted(cols, reverse=True) if c < -1
    ]:
        inner = d - 1 if d > 0 else d + 1
        want: dict[str, int] = {}
        last = -1
        for j in placed[d]:
            links = dag.upstream_of(j) if d > 0 else dag.downstream_of(j)
            ps = [row[u] for u in links if u in row and near.get(u) == inner]
            last = max(last + 1, round(sum(ps) / len(ps)) if ps else last + 1)
            want[j] = last
        if last + (1 if d in more else 0) >= max_rows:
            want = {j: r for r, j in enumerate(placed[d])}
        row.update(want)
    for d, jobs in placed.items():
        for j in jobs:
            lay.cells.append(Cell(j, d, row[j]))
        if d in more:
            lay.cells.append(Cell("", d, max(row[j] for j in jobs) + 1, more=more[d]))
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


def _gutter(lay: DagLayout, left: int, right: int, height: int) -> list[list[str]]:
    """The characters between two columns: each target's vertical run gets a lane.

    A turn or a fork is `+`; where a horizontal run crosses another edge's vertical
    run without joining it, the horizontal wins (`-`), so a `+` always means "joined" and
    every node's line reaches its own turn unbroken (a `|` drawn over it read as `+|+>`).
    """
    where = {c.job: c for c in lay.cells if c.job}
    horiz = [[False] * GUTTER for _ in range(height)]
    vert = [[False] * GUTTER for _ in range(height)]
    joint = [[False] * GUTTER for _ in range(height)]
    arrow = [False] * height
    targets: dict[str, list[int]] = {}
    for u, v in lay.edges:
        if where[u].column == left and where[v].column == right:
            targets.setdefault(v, []).append(where[u].row)
    # Targets fed by exactly the same sources share one bus: that drawing is exact,
    # and it keeps a fan-out (or fan-in) to a single vertical line.
    groups: dict[frozenset[int], list[int]] = {}
    for v, src_rows in targets.items():
        groups.setdefault(frozenset(src_rows), []).append(where[v].row)
    taken: dict[int, list[tuple[int, int]]] = {
        lane: [] for lane in range(1, GUTTER - 1)
    }
    for srcs, dst_rows in sorted(groups.items(), key=lambda kv: min(kv[1])):
        lo, hi = min([*srcs, *dst_rows]), max([*srcs, *dst_rows])
        # The first lane whose runs do not overlap this one; else the least crowded.
        free = [
            ln for ln, runs in taken.items() if all(b < lo or a > hi for a, b in runs)
        ]
        lane = free[0] if free else min(taken, key=lambda ln: len(taken[ln]))
        taken[lane].append((lo, hi))
        for r in range(lo, hi + 1):
            vert[r][lane] = vert[r][lane] or hi > lo
        for r in srcs:
            for x in range(0, lane + 1):
                horiz[r][x] = True
            joint[r][lane] = joint[r][lane] or hi > lo
        for rv in dst_rows:
            for x in range(lane, GUTTER - 1):
                horiz[rv][x] = True
            joint[rv][lane] = joint[rv][lane] or hi > lo
            arrow[rv] = True
    out = []
    for r in range(height):
        row = []
        for x in range(GUTTER - 1):
            if joint[r][x]:
                row.append("+")
            elif horiz[r][x]:
                row.append("-")
            elif vert[r][x]:
                row.append("|")
            else:
                row.append(" ")
        row.append(">" if arrow[r] else " ")
        out.append(row)
    return out


def column_widths(lay: DagLayout, width: int) -> dict[int, int]:
    """Width of each column: the selected job's column fits its name, the rest share."""
    ncols = len(lay.columns)
    room = width - GUTTER * (ncols - 1)
    even = max(8, room // max(1, ncols))
    if ncols == 1:
        return {lay.columns[0]: max(8, room)}
    # The pane's title names the centre in full: with two levels a side it takes a third at most,
    # or its neighbours' ids were cut to a few letters at 80 columns.
    centre = min(max(even, len(lay.centre) + 11), max(even, room // (2 if ncols <= 3 else 3)))
    others = max(8, (room - centre) // (ncols - 1))
    return {d: centre if d == 0 else others for d in lay.columns}


def render(
    lay: DagLayout,
    width: int,
    state_of: Callable[[str], JobState],
    critical: Callable[[str], bool],
) -> list[list[Span]]:
    """Draw a layout as lines of spans, ASCII only.

    A node reads `FAIL load_fx*`: its state label, its id, and `*` when it is on the
    run's critical path; the selected job is framed `[...]`. A node with an edge to
    the next column is followed by dashes up to it.

    Args:
        lay: the layout.
        width: columns available.
        state_of: each job's current state.
        critical: whether a job is on the critical path.

    Returns:
        One list of spans per line.
    """
    height = max(1, lay.height)
    widths = column_widths(lay, width)
    grid: list[list[Span]] = [[] for _ in range(height)]
    cursor = [0] * height  # characters written on each line so far
    col_x: dict[int, int] = {}
    x = 0
    for d in lay.columns:
        col_x[d] = x
        x += widths[d] + GUTTER
    col_of = {c.job: c.column for c in lay.cells if c.job}
    leaves = {u for u, v in lay.edges if col_of[v] == col_of[u] + 1}
    # Ids are fitted together, so that no two shown read the same: cut one by one (word by
    # word), siblings that differ only in their last digits came out as one label.
    names = distinct_ids(
        {
            c.job: widths[c.column]
            - len(SHORT[state_of(c.job)])
            - (3 if c.job == lay.centre else 1)
            - (1 if critical(c.job) else 0)
            for c in lay.cells
            if c.job
        }
    )

    def put(row: int, at: int, span: Span) -> None:
        if at > cursor[row]:
            grid[row].append(Span(" " * (at - cursor[row])))
            cursor[row] = at
        grid[row].append(span)
        cursor[row] += len(span.text)

    for k, d in enumerate(lay.columns):
        x0, colw = col_x[d], widths[d]
        for c in (c for c in lay.cells if c.column == d):
            if not c.job:
                put(c.row, x0, Span(clip(f"  +{c.more} more", colw), role="more"))
                continue
            st = state_of(c.job)
            label = SHORT[st]
            star = "*" if critical(c.job) else ""
            if c.job == lay.centre:
                name = names[c.job]
                put(c.row, x0, Span("[", role="centre"))
                put(c.row, x0 + 1, Span(label, st))
                put(c.row, x0 + 1 + len(label), Span(f" {name}{star}]", role="centre"))
            else:
                name = names[c.job]
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
            if c.job in leaves and cursor[c.row] < x0 + colw:
                put(
                    c.row,
                    cursor[c.row],
                    Span("-" * (x0 + colw - cursor[c.row]), role="edge"),
                )
        if k + 1 < len(lay.columns):
            for r, chars in enumerate(_gutter(lay, d, lay.columns[k + 1], height)):
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

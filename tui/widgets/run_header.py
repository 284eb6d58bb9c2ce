"""The run header: identity, liveness, progress, counts per state, elapsed, forecast."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.labels import SHORT, TINY, clip, fmt_clock, fmt_duration, progress_bar
from tui.messages import LiveStatus, RunInfo
from tui.run_figures import RunSummary
from tui.widgets.tones import TONE_CSS, state_style, tone_classes, tone_style
from wloadctl.core.states import JobState, is_holding

# Trouble first, then work in hand, then the rest: what an operator scans for.
_COUNT_ORDER = (
    JobState.FAILED,
    JobState.TIMED_OUT,
    JobState.UPSTREAM_FAILED,
    JobState.HELD,
    JobState.RETRY_WAIT,
    JobState.RUNNING,
    JobState.QUEUED,
    JobState.READY,
    JobState.WAITING,
    JobState.SUCCEEDED,
    JobState.SKIPPED,
    JobState.CANCELLED,
)
"""The order of the counts on the progress line."""
_ENDED_BADLY = (JobState.FAILED, JobState.TIMED_OUT, JobState.UPSTREAM_FAILED, JobState.CANCELLED)
"""States a finished run's header names, each with its count."""
_BAR_MIN = 10
"""The progress bar gives way down to this many columns before the counts take their tiniest labels."""


def abbreviated(n: int) -> str:
    """A count in at most four characters: 9999, 16k, 167k, 1.2M, 12M."""
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n // 1000}k"
    if n < 10_000_000:
        return f"{n // 100_000 / 10:.1f}M"
    return f"{n // 1_000_000}M"


def progress_parts(
    counts: list[int], done: int, total: int, percent: float, width: int
) -> tuple[int, str, str, list[tuple[JobState, str]], str]:
    """The progress line fitted to `width`: every count is shown, in shorter words as the line narrows.

    The forms are tried in turn until one fits: labels and counts in full, then one space between
    them, then counts abbreviated (16k), then a shorter bar, then no bar (the share done is a figure
    too), then the tiniest labels.
    A bar's width depends on the terminal's width and the form only, so it does not move as counts
    change. On a line too narrow even for the last form, the counts cut off are counted in a `+N`
    at its end.

    Args:
        counts: jobs per state value.
        done: jobs in a terminal state.
        total: jobs in the run.
        percent: share done, 0-100.
        width: columns of the line.

    Returns:
        (bar width, 0 for none; the done figure; what goes before each count; (state, text) of
        each count; what follows them).
    """
    shown = [(st, n) for st in _COUNT_ORDER if (n := counts[st] if st < len(counts) else 0)]
    bar = max(_BAR_MIN, min(32, width // 4))
    forms = (
        (SHORT, str, "  ", bar),
        (SHORT, str, " ", bar),
        (SHORT, abbreviated, " ", bar),
        (SHORT, abbreviated, " ", _BAR_MIN),
        (SHORT, abbreviated, " ", 0),
        (TINY, abbreviated, " ", _BAR_MIN),
        (TINY, abbreviated, " ", 0),
    )
    for labels, num, sep, bar_width in forms:
        done_text = f" {num(done)}/{num(total)} {percent:.0f}%"
        parts = [(st, f"{labels[st]} {num(n)}") for st, n in shown]
        if bar_width + len(done_text) + sum(len(sep) + len(t) for _, t in parts) <= width:
            return bar_width, done_text, sep, parts, ""
    # Too narrow for every count: those that go are counted at the end, never dropped unsaid.
    room = width - len(done_text)
    kept: list[tuple[JobState, str]] = []
    for i, part in enumerate(parts):
        rest = len(parts) - i - 1
        tail = f" +{rest}" if rest else ""
        if 1 + len(part[1]) + len(tail) > room:
            return 0, done_text, " ", kept, f" +{len(parts) - i}"
        kept.append(part)
        room -= 1 + len(part[1])
    return 0, done_text, " ", kept, ""


def held_words(n: int, held: list[str], room: int) -> str:
    """` 5 held: a, b ...`: the held jobs named as many as fit in `room` columns, ` ...` after them when
    some are not named (none fits: ` 5 held ...`).

    Args:
        n: how many jobs are held.
        held: the first of them, by id.
        room: the columns the words may take.
    """
    head = f" {n} held"
    names: list[str] = []
    for k, job in enumerate(held):
        more = " ..." if n > k + 1 else ""
        if len(head) + len(": ") + len(", ".join([*names, job])) + len(more) > room:
            break
        names.append(job)
    more = " ..." if n > len(names) else ""
    return f"{head}: {', '.join(names)}{more}" if names else f"{head}{more}"


class RunHeader(Widget):
    """Two lines at the top of the main screen."""

    DEFAULT_CSS = (
        "RunHeader { height: 2; padding: 0 1; text-wrap: nowrap; "
        "text-overflow: clip; }\n" + TONE_CSS.format(cls="RunHeader")
    )
    COMPONENT_CLASSES = tone_classes()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.info: RunInfo | None = None
        """The run's identity."""
        self.summary: RunSummary | None = None
        """Progress figures."""
        self.counts: list[int] = []
        """Jobs per state value."""
        self.status: LiveStatus | None = None
        """Liveness of the scheduler."""
        self.now = 0.0
        """The time of the figures."""
        self.load_step = ""
        """What is being loaded, before the run can be shown."""
        self.held: list[str] = []
        """First held jobs, named while the run only waits for their release."""
        self.mode = ""
        """"read-only" or "" (shown so an operator knows why keys do nothing)."""
        self.approvals = 0
        """Requests and confirmation jobs waiting for an operator's approve (`A` lists them)."""
        self.late = 0
        """Jobs past their deadline: not done, or done after it."""
        self.at_risk = 0
        """Unfinished jobs within their risk window (the scheduler's AT_RISK, as `status` counts them)."""
        self.blocked = 0
        """Jobs with a deadline to come that cannot make it without an operator (failed, held, blocked)."""

    def show(
        self,
        info: RunInfo | None,
        summary: RunSummary | None,
        counts: list[int],
        status: LiveStatus | None,
        now: float,
    ) -> None:
        """Take fresh figures and repaint."""
        self.info, self.summary, self.counts, self.status, self.now = (
            info,
            summary,
            counts,
            status,
            now,
        )
        self.refresh()

    def render(self) -> Text:
        """Both lines as text, cut at the width (never wrapped)."""
        out = Text(no_wrap=True, overflow="crop")
        info, s, st = self.info, self.summary, self.status
        if info is None or s is None:
            out.append(f"loading the run: {self.load_step or 'starting'}...")
            if st is not None and st.error:
                out.append(f"\n{st.error}", tone_style(self, "bad"))
            return out
        # Deadlines in danger, as `status` names them, whatever the scheduler's state (after it).
        flags = Text()
        if self.late:
            flags.append(f"  {self.late} LATE", tone_style(self, "bad"))
        if self.at_risk:
            flags.append(f"  {self.at_risk} AT_RISK", tone_style(self, "warn"))
        if self.blocked:
            flags.append(f"  {self.blocked} BLOCKED", tone_style(self, "warn"))  # (the SLA pane names them)
        if self.mode:
            flags.append(f"  [{self.mode}]", tone_style(self, "warn"))
        if self.approvals:
            flags.append(f"  {self.approvals} wait for approve (A)", tone_style(self, "warn"))
        # A long name (up to 200 bytes; CJK takes two columns a character) leaves half the line to the state.
        out.append(clip(info.plan_name, max(12, self.size.width // 2)), "bold")
        if info.latest:
            out.append(f"  bd {info.business_date}  ")
        else:
            # An earlier run of its directory: which one it is comes first, its business date after.
            out.append(f"  run {info.run_id}  ", "bold")
        if st is None:
            out.append("...")
        elif st.error:
            out.append(f"FEED ERROR {st.error}", tone_style(self, "bad"))
        elif st.live and not st.responding:
            # Its board is there but it no longer beats (stopped, hung): what is shown is as of its last beat.
            out.append("NOT RESPONDING", tone_style(self, "bad"))
            age = fmt_duration(st.beat_age) if st.beat_age is not None else "?"
            out.append(f" pid {st.scheduler_pid}, last beat {age} ago")
        elif st.live and st.paused:
            # Up, but dispatching nothing until what it waits for (disk space) comes back.
            out.append(f"PAUSED: {st.paused}", tone_style(self, "bad"))
            out.append(f" pid {st.scheduler_pid}")
        elif st.live and is_holding(self.counts):
            # Up, but nothing moves until an operator releases a held job. The jobs' names take the room the
            # deadlines' flags leave: those must show at 80 columns, a name more need not.
            n = self.counts[JobState.HELD]
            out.append("HOLDING", tone_style(self, "warn"))
            room = self.size.width - out.cell_len - flags.cell_len
            out.append(held_words(n, self.held, room))
        elif st.live:
            out.append("LIVE", tone_style(self, "ok"))
            out.append(f" pid {st.scheduler_pid}")
        elif s.done == s.total:
            # Each state by its own name, as `status` counts them: a job blocked by a failure did not fail.
            ended = [f"{n} {state.name}" for state in _ENDED_BADLY
                     if (n := self.counts[state] if state < len(self.counts) else 0)]
            out.append(
                "FINISHED, " + ", ".join(ended) if ended else "FINISHED",
                tone_style(self, "bad" if s.bad else "ok"),
            )
        else:
            # Stopped on purpose, or crashed and about to be restarted by the console.
            out.append("STOPPED, NO SCHEDULER", tone_style(self, "bad"))
        out.append_text(flags)
        # The rest goes in while it fits, most useful first: narrow loses the run id (or the business date
        # of an earlier run).
        room = self.size.width - out.cell_len
        extras = [f"  {fmt_duration(s.elapsed)} elapsed"]
        if s.forecast is None and s.done < s.total and st is not None and st.live:
            extras.append(", ? to go")  # no expected durations to go on
        elif s.forecast is not None and s.done < s.total:
            extras.append(
                f", ~{fmt_duration(s.forecast)} to go "
                f"({fmt_clock(self.now + s.forecast)[:5]})"
            )
        extras.append(f"  run {info.run_id}" if info.latest else f"  bd {info.business_date}")
        for part in extras:
            if len(part) > room:
                break  # (what comes after a part left out would read as its: ", ? to go" alone)
            out.append(part)
            room -= len(part)
        out.append("\n")
        bar, done, sep, parts, more = progress_parts(
            self.counts, s.done, s.total, s.percent, self.size.width
        )
        if bar:
            frac = s.done / s.total if s.total else 1.0
            out.append(progress_bar(frac, bar), tone_style(self, "bad" if s.bad else "ok"))
        out.append(done)
        for state, text in parts:
            out.append(sep)
            out.append(text, state_style(self, state))
        out.append(more)
        return out

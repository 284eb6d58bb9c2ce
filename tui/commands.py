"""Textual-free `:` command line: parsing, with messages that say what is accepted."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tui.idlist import IdList
from tui.impact import VERB_KEYS
from tui.view_model import SORT_HEADINGS, SORT_KEYS, sort_key_named

VIEW_COMMANDS: dict[str, str] = {
    "filter": "filter TEXT: show matching jobs (same syntax as /); no text clears it",
    "sort": f"sort KEY [desc]: sort the table by {', '.join(SORT_KEYS)} "
    f"(or a column's heading: {', '.join(h.lower() for k, h in SORT_HEADINGS.items() if h.lower() != k)})",
    "job": "job ID: open a job's detail",
    "goto": "goto ID: put the cursor on a job",
    "dag": "dag N: show N levels around the job (1-4)",
    "nodes": "nodes: show node health",
    "sla": "sla: show the SLA tiers",
    "resume": "resume: start a scheduler for an interrupted run",
    "runs": "runs: the list of every run (esc from a run with nothing to clear)",
    "run": "run NAME: open another run, by plan name or run id",
    "help": "help: keys and the state legend",
    "quit": "quit: leave the console (asks about a live run)",
}
"""Commands that are not operator verbs, with their one-line help."""

VERB_HELP: dict[str, str] = {
    verb: f"{verb} [ID|GLOB ...]{' [--downstream]' if verb == 'rerun' else ''}: "
    f"{verb} the named jobs "
    "(default: the marked or selected ones)"
    for verb in VERB_KEYS
}
"""One-line help of each verb command."""

ALIASES = {
    "q": "quit",
    "f": "filter",
    "ok": "set-ok",
    "setok": "set-ok",
    "?": "help",
    "o": "job",
}
"""Short forms operators type."""


class CommandError(ValueError):
    """The command line cannot be understood; the message says what would be."""


@dataclass(frozen=True)
class Command:
    """A parsed command line."""

    name: str
    """The command (a verb or one of VIEW_COMMANDS)."""
    args: tuple[str, ...] = ()
    """Its words after the name."""
    downstream: bool = False
    """`--downstream` was given (rerun)."""

    @property
    def is_verb(self) -> bool:
        """Whether it is an operator verb."""
        return self.name in VERB_KEYS


def parse_command(text: str) -> Command:
    """Read a command line such as `rerun load_gl --downstream` or `sort duration desc`.

    Raises:
        CommandError: empty, unknown command, or wrong arguments.
    """
    words = text.split()
    if not words:
        raise CommandError("type a command; `help` lists them")
    name = ALIASES.get(words[0].lower(), words[0].lower())
    args = words[1:]
    if name in VERB_KEYS:
        downstream = "--downstream" in args or "-d" in args
        args = [a for a in args if a not in ("--downstream", "-d")]
        if downstream and name != "rerun":
            raise CommandError(f"--downstream applies to rerun only, not {name}")
        return Command(name, tuple(args), downstream)
    if name not in VIEW_COMMANDS:
        known = ", ".join([*VERB_KEYS, *VIEW_COMMANDS])
        raise CommandError(f"unknown command '{words[0]}'; commands: {known}")
    if name == "sort":
        key = sort_key_named(args[0]) if args else None
        order = args[1].lower() if len(args) == 2 else "asc"
        if key is None or len(args) > 2 or order not in ("asc", "desc"):
            raise CommandError(VIEW_COMMANDS["sort"])
        args = [key, order] if len(args) == 2 else [key]
    elif name in ("job", "goto", "run") and len(args) != 1:
        raise CommandError(VIEW_COMMANDS[name])
    elif name == "dag" and (
        len(args) != 1 or not args[0].isdigit() or not 1 <= int(args[0]) <= 4
    ):
        raise CommandError(VIEW_COMMANDS["dag"])
    elif name in ("nodes", "sla", "resume", "help", "quit", "runs") and args:
        raise CommandError(f"{name} takes no argument")
    return Command(name, tuple(args))


def resolve(
    names: tuple[str, ...], ids: Sequence[str], index: Mapping[str, int]
) -> tuple[list[int], list[str]]:
    """Indices of the jobs named by ids or globs, in plan order, and the names matching nothing.

    A glob is matched as the scheduler matches it (wloadctl.core.verbs.resolve_jobs: case
    counts); the ids of a big run are searched in their file's bytes (IdList.matching).
    """
    found: set[int] = set()
    unknown: list[str] = []
    for name in names:
        if not any(c in name for c in "*?["):
            hits = [index[name]] if name in index else []
        elif isinstance(ids, IdList):
            hits = ids.matching(name, fold=False)
        else:
            match = re.compile(fnmatch.translate(name)).match
            hits = [k for k, j in enumerate(ids) if match(j)]
        if not hits:
            unknown.append(name)
        found.update(hits)
    return sorted(found), unknown

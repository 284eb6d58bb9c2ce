"""Typed reading of single plan fields (command, retries, durations, resources)."""

from __future__ import annotations

import dataclasses
import pwd
import re
from typing import Any

from wloadctl.core.condition import OWN_NAMES, ConditionError, check_comparisons, parse_condition
from wloadctl.core.durations import (
    FINEST,
    DurationRangeError,
    duration_guess,
    format_duration,
    parse_deadline,
    parse_duration,
)
from wloadctl.core.outputcap import NO_CAP, SIZE_FORMS, parse_size
from wloadctl.core.plan import DEFAULT_MAX_ITEMS, JOB_TYPES, NO_RETRY, DynamicItems, RetryPolicy
from wloadctl.core.planvalues import (
    KEY_SHOWN,
    FieldError,
    amounts,
    boolean,
    choice_hint,
    duration,
    first_repeated,
    integer,
    key_hint,
    key_text,
    mapping,
    meant_key,
    number,
    text_of,
)
from wloadctl.core.states import DepKind, SlaTier
from wloadctl.core.yamltree import Entry, describe

JOB_KEYS: tuple[str, ...] = (
    "command",
    "type",
    "depends_on",
    "sla",
    "priority",
    "timeout",
    "max_output",
    "retries",
    "resources",
    "env",
    "cwd",
    "idempotent",
    "deadline",
    "not_before",
    "preemptible",
    "if",
    "until",
    "max_iterations",
    "for_each",
    "group",
    "pool",
    "agent",
    "cpu",
    "memory",
    "expected",
    "run_as",
    "confirm",
    "four_eyes",
    "description",
)
"""Keys a job may have, in the order the docs list them."""

DEFAULT_KEYS: tuple[str, ...] = tuple(
    k for k in JOB_KEYS if k not in ("command", "depends_on", "for_each")
)
"""Keys `defaults` may have: every job key but the two that make a job what it is."""

RETRY_KEYS: tuple[str, ...] = (
    "count",
    "delay",
    "backoff",
    "max_delay",
    "jitter",
    "exit_codes",
    "on_timeout",
    "on_signal",
    "on_lost",
    "on_max_output",
)
"""Keys of a `retries` mapping."""

TOP_KEYS: tuple[str, ...] = (
    "name",
    "defaults",
    "resources",
    "variables",
    "on_failure",
    "timezone",
    "groups",
    "schedule",
    "share",
    "limits",
    "roles",
    "four_eyes",
    "jobs",
)
"""Keys at the top of a plan."""

SLA_NAMES: dict[str, SlaTier] = {tier.label: tier for tier in SlaTier}
"""SLA tiers by the name used in plans."""

DEP_KIND_NAMES: dict[str, DepKind] = {kind.name.lower(): kind for kind in DepKind}
"""Dependency kinds by the name used in plans."""

JOB_ID = re.compile(r"[A-Za-z0-9_.:-]+")
"""What a job id may be made of."""

PLACE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a pool or agent name may be made of (it becomes part of a broker subject)."""
LOCAL_POOL = "local"
"""The pool of this host's own executors."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# (re.ASCII: `\d` matches other scripts' digits too, Arabic-Indic or fullwidth, which int() and float()
# read as numbers)
_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", re.ASCII)
_MAX_PRIORITY = 1_000_000
_MAX_RETRIES = 1000
_MAX_BACKOFF = 100.0
"""The largest retry backoff factor: each retry's delay grows by it (10 turns 1 s into 3 h by the fifth)."""
_MAX_ITERATIONS = 100_000
_MAX_ITEMS = 1_000_000
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KkMmGgTt](?:i?[Bb])?)?", re.ASCII)
_EXAMPLES = {
    "if": 'write e.g. jobs["load"].exit_code == 0, jobs.load.result.rows > 10, '
    'vars.region == "emea"',
    "until": "write e.g. result.ready == 1, exit_code == 0 and iteration >= 3",
}
# A bounded intern table: shared command templates cost one string, while a
# plan where every command differs does not grow a second copy of them all.
_INTERN_LIMIT = 65536


def _when_hint(text: str) -> str | None:
    """The likely meaning of a deadline or not-before that is neither form: a `+duration` given
    without its `+` (`2h`), or a misspelt duration after it (`+10 mins`)."""
    stripped = text.strip()
    clock = re.fullmatch(r"([01]?\d|2[0-3])\.?([0-5]\d)", stripped, re.ASCII)
    if clock is not None:
        # `2330`, `23.30`, `0100`: a time of day written without its colon (a duration needs its `+` and a unit).
        return f"did you mean '{int(clock[1]):02d}:{clock[2]}'?"
    span = stripped[1:] if stripped.startswith("+") else stripped
    guess = duration_guess(span)
    if guess is None and span is stripped:
        try:
            if not parse_duration(span, finest=FINEST):
                return None
        except ValueError:
            return None
        guess = span.strip()
    return None if guess is None else f"did you mean '+{guess}'?"


class FieldReader:
    """Reads the fields of jobs and defaults, sharing equal values to save memory.

    A million-job plan repeats the same few commands, retry policies and
    resource sets; each distinct value is kept once.
    """

    def __init__(self, capacity: dict[str, int], declared: tuple[str, ...] = ()) -> None:
        """Prepare for a plan whose declared resources are `capacity`."""
        self.capacity = capacity
        """Declared resources and their capacity."""
        self.declared = declared
        """Every resource name the plan declares, in its order, its capacity right or wrong (a wrong one is
        reported once, where it is declared, and not again for each job that asks for it)."""
        self.extra: list[FieldError] = []
        """More problems of the field just read (it gave a value); callers empty it."""
        self.shared: dict[Any, Any] = {}
        """Interned commands, tuples and retry policies."""
        self.default_env: dict[str, str] = {}
        """The defaults' env, under which each job's env is merged."""
        self.default_retry = NO_RETRY
        """The defaults' retry policy: a job's bare `retries: N` keeps its delays."""

    def share(self, value: Any) -> Any:
        """The kept copy of an equal value (or `value`, kept now if there is room)."""
        found = self.shared.get(value)
        if found is not None:
            return found
        if len(self.shared) < _INTERN_LIMIT:
            self.shared[value] = value
        return value

    def command(self, entry: Entry) -> str | tuple[str, ...]:
        """`command`: shell text, or a list of argv strings."""
        value, line, _ = entry
        if type(value) is str:
            if not value.strip():
                raise FieldError(
                    "command is empty", line, "give a shell command or an argv list"
                )
            return self.share(value)
        if type(value) is list:
            if not value:
                raise FieldError(
                    "command is an empty list", line, "give at least the program name"
                )
            argv = []
            for item in value:
                if item[2] is None or item[0] is None:
                    raise FieldError(
                        f"command list items must be text, not {describe(item[0])}",
                        item[1],
                    )
                argv.append(item[2] if type(item[0]) is not str else item[0])
            return self.share(tuple(argv))
        raise FieldError(
            f"command must be text or a list of text, not {describe(value)}",
            line,
            f"quote it: command: '{entry[2]}'" if entry[2] else None,
        )

    def job_type(self, entry: Entry) -> str:
        """`type`: shell or noop."""
        word = text_of(entry, "type")
        if word not in JOB_TYPES:
            raise FieldError(
                f"unknown job type '{word}'", entry[1], choice_hint(word, JOB_TYPES)
            )
        return self.share(word)

    def depends_on(
        self, entry: Entry
    ) -> tuple[list[str], list[int], tuple[DepKind, ...] | None]:
        """`depends_on`: a list of ids, or a mapping id -> success | failure | done.

        Returns:
            (ids, line of each id, kinds or None when all are `success`).
        """
        value, line, _ = entry
        if type(value) is list:
            names = []
            lines = []
            for item in value:
                name = item[2]
                if name is None or item[0] is None:
                    raise FieldError(
                        f"depends_on items must be job ids, not {describe(item[0])}",
                        item[1],
                    )
                names.append(name)
                lines.append(item[1])
            return names, lines, None
        if type(value) is dict:
            kinds = []
            names = list(value)
            lines = []
            for name, item in value.items():
                word = item[2]
                if word is None or item[0] is None:
                    # A mapping, a list or nothing: it has no text to name as a kind, nor to guess one from.
                    raise FieldError(
                        f"depends_on '{name}' must be success, failure or done, not {describe(item[0])}",
                        item[1],
                    )
                kind = DEP_KIND_NAMES.get(word) if type(word) is str else None
                if kind is None:
                    raise FieldError(
                        f"unknown dependency kind '{word}' for '{name}'",
                        item[1],
                        choice_hint(str(word), list(DEP_KIND_NAMES)),
                    )
                kinds.append(kind)
                lines.append(item[1])
            if all(kind is DepKind.SUCCESS for kind in kinds):
                return names, lines, None
            return names, lines, self.share(tuple(kinds))
        if value is None:
            return [], [], None
        raise FieldError(
            f"depends_on must be a list of job ids or a mapping, not {describe(value)}",
            line,
            "write depends_on: [a, b] or depends_on: {a: success, b: failure}",
        )

    def sla(self, entry: Entry) -> SlaTier:
        """`sla`: critical | high | standard | low."""
        value, line, text = entry
        tier = SLA_NAMES.get(value) if type(value) is str else None
        if tier is None:
            if text is None:
                raise FieldError(f"sla must be a tier, not {describe(value)}", line,
                                 f"use one of: {', '.join(SLA_NAMES)}")
            word = str(text)
            tier = SLA_NAMES.get(word.lower())
            if tier is None:
                raise FieldError(
                    f"unknown SLA tier '{word}'",
                    line,
                    choice_hint(word, list(SLA_NAMES)),
                )
        return tier

    def priority(self, entry: Entry) -> int:
        """`priority`: higher runs first within a tier."""
        return integer(entry, "priority", -_MAX_PRIORITY, _MAX_PRIORITY)

    def timeout(self, entry: Entry) -> float | None:
        """`timeout`: a duration, or null for none."""
        if entry[0] is None:
            return None
        return duration(entry, "timeout", positive=True)

    def max_output(self, entry: Entry) -> int | None:
        """`max_output`: bytes of output an attempt may write (`64KiB`, `100MB`, `1GiB`), or none/unlimited."""
        value, line, text = entry
        if type(value) is str and value.strip().lower() in NO_CAP:
            return None
        if type(value) is str:
            try:
                size = parse_size(value)
            except ValueError as err:
                raise FieldError(f"max_output: {err}", line, SIZE_FORMS) from None
        elif type(value) is int:
            size = value
        else:
            # (null too: a key left empty is no clear wish to lift the cap, which is written `none`)
            raise FieldError(f"max_output must be a size, not {describe(value)}", line, SIZE_FORMS)
        if size <= 0:
            raise FieldError(f"max_output must be more than zero, not {text if text is not None else value}",
                             line, "give a size such as 64KiB, or write none for no cap")
        return size

    def retries(self, entry: Entry) -> RetryPolicy:
        """`retries`: a count (the defaults' policy with that count), or a policy."""
        if type(entry[0]) is not dict:
            count = integer(entry, "retries", 0, _MAX_RETRIES)
            policy = dataclasses.replace(self.default_retry, count=count)
            return self.share(policy)
        fields = entry[0]
        extra = [k for k in fields if k not in RETRY_KEYS]
        for key in extra:
            self.extra.append(
                FieldError(
                    f"unknown key '{key_text(key)}' in retries",
                    fields[key][1],
                    key_hint(key, RETRY_KEYS),
                )
            )
        if "count" not in fields:
            if any(len(k) <= KEY_SHOWN and meant_key(k, RETRY_KEYS) == "count" for k in extra):
                # (the misspelt count is told as such above: "needs a count" would be a second line for it)
                return self.default_retry
            raise FieldError(
                "retries needs a count",
                entry[1],
                "add count: N (retries after the first try)",
            )
        kw: dict[str, Any] = {
            "count": integer(fields["count"], "retries count", 0, _MAX_RETRIES)
        }
        if "delay" in fields:
            kw["delay"] = duration(fields["delay"], "retries delay")
        if "backoff" in fields:
            kw["backoff"] = number(fields["backoff"], "retries backoff", 1.0, _MAX_BACKOFF)
        if "max_delay" in fields:
            kw["max_delay"] = duration(fields["max_delay"], "retries max_delay")
            if kw.get("delay", 0.0) > kw["max_delay"]:
                raise FieldError(
                    f"retries max_delay {format_duration(kw['max_delay'])} is shorter than the delay "
                    f"{format_duration(kw['delay'])}: no retry could wait as long as its delay",
                    fields["max_delay"][1],
                    "give a max_delay of at least the delay, or leave it out",
                )
        elif kw.get("delay", 0.0) > NO_RETRY.max_delay:
            # A delay longer than the default cap is meant: the cap grows to it, not the delay shrinks.
            kw["max_delay"] = kw["delay"]
        if "jitter" in fields:
            kw["jitter"] = number(fields["jitter"], "retries jitter", 0.0, 1.0)
        if "exit_codes" in fields:
            kw["exit_codes"] = self.exit_codes(fields["exit_codes"])
        for key in ("on_timeout", "on_signal", "on_lost", "on_max_output"):
            if key in fields:
                kw[key] = boolean(fields[key], f"retries {key}")
        return self.share(RetryPolicy(**kw))

    def exit_codes(self, entry: Entry) -> tuple[tuple[int, int], ...]:
        """`exit_codes`: a list of codes (1-255) or `a-b` ranges."""
        value, line, _ = entry
        if type(value) is list and not value:
            raise FieldError(
                "exit_codes must not be empty: it would retry no exit code",
                line,
                "list the codes to retry, e.g. exit_codes: [1, 75, '100-110'], or leave exit_codes out to retry "
                "every one",
            )
        if type(value) is not list:
            raise FieldError(
                f"exit_codes must be a list of codes or ranges, not {describe(value)}",
                line,
                "write exit_codes: [1, 75, '100-110']",
            )
        out = []
        for item in value:
            match = (
                _RANGE.fullmatch(item[2])
                if item[2] is not None and item[0] is not None
                else None
            )
            low = int(match.group(1)) if match else -1
            high = int(match.group(2) or low) if match else -1
            if not 1 <= low <= high <= 255:
                raise FieldError(
                    f"'{item[2]}' is not an exit code or range",
                    item[1],
                    "use codes 1-255 or ranges like '100-110'",
                )
            out.append((low, high))
        return tuple(out)

    def resources(self, entry: Entry) -> tuple[tuple[str, int], ...]:
        """`resources`: declared resource -> amount held while the job runs (each wrong one is told, in `extra`)."""
        out = []
        for name, amount, line in amounts(entry, "resource", self.extra):
            cap = self.capacity.get(name)
            if cap is None and name in self.declared:
                continue
            if cap is None:
                declared = f"declared: {', '.join(self.declared)}" if self.declared else "none are declared"
                self.extra.append(FieldError(
                    f"resource '{name}' is not declared",
                    line,
                    f"declare it under the plan's top-level resources; {declared}",
                ))
            elif amount > cap:
                self.extra.append(FieldError(
                    f"asks for {amount} of resource '{name}', which has only {cap}",
                    line,
                    f"ask for at most {cap}, or raise its capacity",
                ))
            else:
                out.append((name, amount))
        return self.share(tuple(out))

    def env(self, entry: Entry) -> tuple[tuple[str, str], ...]:
        """`env`: variables added to the job's environment, over the defaults' env."""
        merged = dict(self.default_env)
        for name, item in mapping(entry, "env").items():
            if not _ENV_NAME.fullmatch(name):
                raise FieldError(
                    f"'{name}' is not an environment variable name",
                    item[1],
                    "use letters, digits and _, not starting with a digit",
                )
            if item[0] is None or type(item[0]) in (dict, list):
                # (`A: null` or a bare `A:` is no value: it is not read as the empty one unsaid.
                # Each wrong value is told, in `extra`.)
                hint = f"write {name}: '' for an empty value" if item[0] is None else None
                self.extra.append(FieldError(f"env '{name}' must be text, not {describe(item[0])}", item[1], hint))
                continue
            merged[name] = str(item[2])
        return self.share(tuple(merged.items()))

    def cwd(self, entry: Entry) -> str | None:
        """`cwd`: the working directory."""
        return None if entry[0] is None else text_of(entry, "cwd")

    def idempotent(self, entry: Entry) -> bool:
        """`idempotent`: whether a second run is harmless."""
        return boolean(entry, "idempotent")

    def confirm(self, entry: Entry) -> bool:
        """`confirm`: the job waits for an operator's `approve` before it starts."""
        return boolean(entry, "confirm")

    def four_eyes(self, entry: Entry) -> tuple[str, ...]:
        """`four_eyes`: verbs on this job that need a second person's approve."""
        from wloadctl.core.plantop import read_four_eyes

        return self.share(read_four_eyes(entry))

    def preemptible(self, entry: Entry) -> bool:
        """`preemptible`: whether a critical job may stop this one."""
        return boolean(entry, "preemptible")

    def deadline(self, entry: Entry) -> str | None:
        """`deadline`: HH:MM[:SS] (+1d for the next day) or +duration."""
        return self._when(entry, "deadline")

    def not_before(self, entry: Entry) -> str | None:
        """`not_before`: the same forms as a deadline."""
        return self._when(entry, "not_before")

    def _when(self, entry: Entry, what: str) -> str | None:
        # The source text counts: YAML 1.1 reads an unquoted 06:30 as base-60 390.
        value, line, text = entry
        if value is None:
            return None
        if text is None or type(value) is bool:
            raise FieldError(f"{what} must be a time, not {describe(value)}", line)
        try:
            relative, seconds = parse_deadline(text, finest=FINEST)
        except DurationRangeError as err:
            # (Said of the whole text, its `+` too: the duration alone, after it, is what was too long or short.)
            said = str(err)
            body = text.strip()
            if body.startswith("+") and said.startswith(f"'{body[1:].strip()}'"):
                said = f"'{body}'" + said[len(body[1:].strip()) + 2:]
            raise FieldError(f"{what}: {said}", line) from None
        except ValueError as err:
            raise FieldError(f"{what}: {err}", line, _when_hint(text)) from None
        if relative and not seconds and what == "deadline":
            raise FieldError(f"deadline '{text.strip()}' is the very start of the run: no job can finish by then",
                             line, "give a time after the start, e.g. +2h, or a time of day")
        return text.strip()

    def condition(self, entry: Entry) -> str | None:
        """`if`: an expression over upstream results and plan variables."""
        return self._expression(entry, "if")

    def until(self, entry: Entry) -> str | None:
        """`until`: an expression over the job's own result that ends its repeats."""
        return self._expression(entry, "until")

    def max_iterations(self, entry: Entry) -> int:
        """`max_iterations`: the most runs of an `until` job."""
        return integer(entry, "max_iterations", 1, _MAX_ITERATIONS)

    def _expression(self, entry: Entry, what: str) -> str | None:
        value = entry[0]
        if value is None:
            return None
        if type(value) is bool:
            # YAML's booleans (true, false, True, yes, off...) are the condition's constants, whatever their
            # spelling: `if: false` turns a job off (SKIPPED) without taking it out of the plan.
            text = "True" if value else "False"
        elif type(value) is not str:
            # A number is no condition (`if: 5` would always hold), nor a list or mapping.
            raise FieldError(f"{what} must be text, not {describe(value)}", entry[1], _EXAMPLES[what])
        else:
            text = text_of(entry, what, lenient=True)
        try:
            cond = parse_condition(text)
            check_comparisons(cond)
        except ConditionError as err:
            raise FieldError(f"{what}: {err}", entry[1], err.hint or _EXAMPLES[what]) from None
        if what == "until" and cond.jobs:
            # An `until` is evaluated on the job's own outcome alone: another job's reads as nothing.
            raise FieldError(f"until reads job '{min(cond.jobs)}': an until reads only the job's own "
                             f"{', '.join(OWN_NAMES)} and vars", entry[1], _EXAMPLES[what])
        if what == "if" and cond.own:
            raise FieldError(f"if reads '{min(cond.own)}', which only an until has (the job's own outcome)",
                             entry[1], "read an upstream's: jobs.NAME.result.KEY, jobs.NAME.exit_code")
        return self.share(text)

    def for_each(self, entry: Entry) -> tuple[str, ...] | str | DynamicItems | None:
        """`for_each`: a list of items, `vars.NAME` naming a list variable, or an upstream's output.

        An upstream's output is an expression like `jobs.list_files.result.files` (the same language
        as `if`), or a mapping `{items: EXPR, max_items: N}` to change the cap on instances.
        """
        value, line, _ = entry
        if value is None:
            return None
        if type(value) is str and value.startswith("vars."):
            return value
        if type(value) is str and value.startswith("jobs"):
            return DynamicItems(self._items_expr(entry))
        if type(value) is dict:
            unknown = [k for k in value if k not in ("items", "max_items")]
            if unknown:
                raise FieldError(f"unknown key '{key_text(unknown[0])}' in for_each", value[unknown[0]][1],
                                 "for_each takes items and max_items")
            if "items" not in value:
                raise FieldError("for_each needs items", line, "write for_each: {items: jobs.list.result.files}")
            cap = integer(value["max_items"], "max_items", 1, _MAX_ITEMS) if "max_items" in value \
                else DEFAULT_MAX_ITEMS
            items = value["items"]
            if type(items[0]) is list or (type(items[0]) is str and items[0].startswith("vars.")):
                # A list given here (or by a variable) is read now: the cap holds it to so many items.
                listed = self.for_each(items)
                if isinstance(listed, tuple) and len(listed) > cap:
                    raise FieldError(f"for_each lists {len(listed)} items, more than max_items {cap}", items[1])
                return listed
            return DynamicItems(self._items_expr(items), cap)
        if type(value) is list and not value:
            raise FieldError("for_each lists no items", line, "write for_each: [emea, amer, apac]")
        if type(value) is not list:
            raise FieldError(f"for_each must be a list, vars.NAME or jobs.NAME.result.KEY, not {describe(value)}",
                             line, "write for_each: [emea, amer, apac] or for_each: vars.regions")
        items = []
        for item in value:
            if type(item[0]) not in (str, int, float):
                raise FieldError(f"for_each items must be text or numbers, not {describe(item[0])}", item[1])
            items.append(str(item[0]))
        if len(set(items)) != len(items):
            twice = first_repeated(items)
            raise FieldError(f"for_each lists the item {twice!r} twice", line,
                             "each item makes one instance: list it once")
        return tuple(items)

    def _items_expr(self, entry: Entry) -> str:
        """The expression of a `for_each` over upstream output: it must read at least one job."""
        text = text_of(entry, "for_each items")
        try:
            cond = parse_condition(text)
            check_comparisons(cond)
        except ConditionError as err:
            raise FieldError(f"for_each: {err}", entry[1],
                             err.hint or "write for_each: jobs.list_files.result.files") from None
        if cond.own:
            raise FieldError(f"for_each reads '{min(cond.own)}', which only an until has (the job's own outcome)",
                             entry[1], "write for_each: jobs.list_files.result.files")
        if not cond.jobs:
            raise FieldError("for_each over an upstream's output must read a job", entry[1],
                             "write for_each: jobs.list_files.result.files")
        return self.share(text)

    def cpu(self, entry: Entry) -> float:
        """`cpu`: CPUs the job needs on its executor."""
        return number(entry, "cpu", 0.0, 4096.0)

    def memory(self, entry: Entry) -> int:
        """`memory`: MiB the job needs on its executor, as a number of MiB or with a unit (512M, 4G)."""
        value, line, _ = entry
        if type(value) is int and value >= 0:
            return value
        m = _SIZE.fullmatch(str(value).strip()) if type(value) is str else None
        if not m:
            raise FieldError(f"memory must be MiB or a size like 512M or 4G, not {describe(value)}", line,
                             "write memory: 2G")
        n, unit = float(m.group(1)), (m.group(2) or "M").upper()
        return int(n * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit[0]])

    def group(self, entry: Entry) -> str | None:
        """`group`: the fair-share group the job belongs to (a key of the plan's `groups`)."""
        return None if entry[0] is None else text_of(entry, "group")

    def pool(self, entry: Entry) -> str | None:
        """`pool`: the pool of agents that runs the job (`local`, the default, is this host)."""
        name = self._place_name(entry, "pool")
        return None if name == LOCAL_POOL else name

    def agent(self, entry: Entry) -> str | None:
        """`agent`: the one agent (host) that must run the job."""
        return self._place_name(entry, "agent")

    @staticmethod
    def _place_name(entry: Entry, what: str) -> str | None:
        if entry[0] is None:
            return None
        name = text_of(entry, what)
        if not PLACE_NAME.fullmatch(name):
            raise FieldError(f"{what} must be a name of letters, digits, '_' or '-' (at most 64), not {name!r}",
                             entry[1], f"write {what}: etl-nodes")
        return name

    def expected(self, entry: Entry) -> float | None:
        """`expected`: how long the job is expected to take (a duration), or null to learn it from history."""
        if entry[0] is None:
            return None
        return duration(entry, "expected")
    def run_as(self, entry: Entry) -> str | None:
        """`run_as`: a user of this host the job runs as (the scheduler must run as root)."""
        if entry[0] is None:
            return None
        name = text_of(entry, "run_as")
        try:
            pwd.getpwnam(name)
        except KeyError:
            raise FieldError(f"run_as: unknown user '{name}'", entry[1],
                             "name a user of this host (getent passwd NAME)") from None
        return name

    def description(self, entry: Entry) -> str:
        """`description`: free text."""
        return "" if entry[0] is None else text_of(entry, "description", lenient=True)

"""The top-level fields of a plan read from entries: its name, fair-share groups, schedule, time zone."""

from __future__ import annotations

import datetime as dt
import unicodedata

from wloadctl.core.plan import Schedule
from wloadctl.core.planvalues import FieldError, key_hint, key_text, mapping, positive_number, text_of
from wloadctl.core.yamltree import Entry, describe

ROLE_NAMES = ("viewer", "operator", "admin")
"""Roles a plan's `roles:` may grant (wloadctl.access)."""


PLAN_NAME_MAX = 200
"""The longest plan name, in bytes of UTF-8: the name names the plan's state directory (at most 255)."""


def read_name(entry: Entry) -> str:
    """`name`: how the plan is listed, and the name of its state directory under the state root.

    Any text is taken (a character a directory name cannot hold becomes `_` there), but
    not `.` or `..`, which name the root or its parent, nor a control character, which
    would garble every listing of runs.
    """
    name = text_of(entry, "name", lenient=True)
    bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise FieldError(f"the plan name holds a control character (U+{ord(bad):04X})", entry[1],
                         "use printable text: the name is shown in every listing of runs")
    if name in (".", ".."):
        raise FieldError(f"'{name}' cannot name a plan: it names a folder", entry[1],
                         "the name is the plan's state directory: add a letter or a digit")
    if len(name.encode()) > PLAN_NAME_MAX:
        raise FieldError(f"the plan name is {len(name.encode())} bytes long", entry[1],
                         f"at most {PLAN_NAME_MAX}: the name is the plan's state directory")
    return name


def read_on_failure(entry: Entry) -> str:
    """`on_failure`: the shell command of the hook run when a job fails for good (a process: no NUL byte)."""
    command = text_of(entry, "on_failure")
    if "\0" in command:
        raise FieldError("on_failure holds a NUL byte", entry[1],
                         "no process can be given one; in YAML, \"\\0\" in double quotes is a NUL byte")
    return command


def read_limits(entry: Entry) -> str:
    """`limits`: `claim` (the default) or `enforce` (cpu and memory claims become cgroup limits)."""
    value = text_of(entry, "limits")
    if value not in ("claim", "enforce"):
        raise FieldError(f"limits must be claim or enforce, not {value!r}", entry[1], "write limits: enforce")
    return value


def read_roles(entry: Entry) -> dict[str, dict[str, list[str]]]:
    """`roles`: role -> {users: [...], groups: [...], broker_users: [...]}."""
    out: dict[str, dict[str, list[str]]] = {}
    for role, item in mapping(entry, "roles").items():
        if role not in ROLE_NAMES:
            raise FieldError(f"unknown role '{role}' under roles", item[1], f"roles: {', '.join(ROLE_NAMES)}")
        out[role] = {}
        for kind, names in mapping(item, f"roles.{role}").items():
            if kind not in ("users", "groups", "broker_users") or type(names[0]) is not list:
                raise FieldError(f"roles.{role} takes `users:`, `groups:` and `broker_users:` lists, not {kind!r}",
                                 names[1],
                                 "write admin: {groups: [batchadm]}")
            out[role][kind] = [text_of(n, f"roles.{role}.{kind}") for n in names[0]]
    return out


def read_four_eyes(entry: Entry) -> tuple[str, ...]:
    """`four_eyes`: operator verbs that need a second person's `approve` (a list of known verbs)."""
    from wloadctl.core.verbs import FOUR_EYES_VERBS

    value, line, _ = entry
    hint = f"a list of verbs among {', '.join(FOUR_EYES_VERBS)}, e.g. four_eyes: [kill, set-ok]"
    if type(value) is not list:
        raise FieldError(f"four_eyes must be a list of verbs, not {describe(value)}", line, hint)
    out: list[str] = []
    for item in value:
        verb = text_of(item, "four_eyes")
        if verb not in FOUR_EYES_VERBS:
            raise FieldError(f"four_eyes: unknown verb '{verb}'", item[1], hint)
        if verb not in out:
            out.append(verb)
    return tuple(out)


def group_weights(entry: Entry, problems: list[FieldError]) -> dict[str, float]:
    """`groups`: group name -> positive weight; each wrong weight is told in `problems`, and its group left out.

    Raises:
        FieldError: not a mapping.
    """
    out: dict[str, float] = {}
    for name, item in mapping(entry, "groups").items():
        try:
            out[name] = positive_number(item, f"weight of group {name}", "a weight such as 1 or 2")
        except FieldError as bad:
            problems.append(bad)
    return out


def read_share(entry: Entry) -> float:
    """`share`: the plan's positive weight in the host's fair share between runs."""
    return positive_number(entry, "share", "a weight such as 1 (the default) or 2")


_SCHEDULE_KEYS = ("cron", "business_days", "holidays")
"""The keys a `schedule` takes."""


def read_schedule(entry: Entry) -> Schedule:
    """`schedule`: {cron, business_days, holidays}."""
    from wloadctl.core.calendar import CRON_FIELDS, WEEKDAYS, fires_on_business_days, valid_cron

    fields = mapping(entry, "schedule")
    for key in fields:
        if key not in _SCHEDULE_KEYS:
            raise FieldError(f"unknown key '{key_text(key)}' in schedule", fields[key][1],
                             key_hint(key, _SCHEDULE_KEYS))
    if "cron" not in fields:
        raise FieldError("schedule needs a cron expression", entry[1], "write cron: '30 18 * * 1-5'")
    cron = text_of(fields["cron"], "cron")
    if not valid_cron(cron):
        count = len(cron.split())
        what = f"has {count} fields, not the five of" if count != 5 else "is not"
        raise FieldError(f"'{cron}' {what} a cron expression", fields["cron"][1],
                         f"write {CRON_FIELDS}, e.g. '30 18 * * 1-5'")
    days: tuple[int, ...] = (0, 1, 2, 3, 4)
    if "business_days" in fields:
        raw = fields["business_days"]
        if type(raw[0]) is not list:
            raise FieldError("business_days must be a list of weekdays", raw[1], "write [mon, tue, wed, thu, fri]")
        picked = []
        full = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
        for item in raw[0]:
            word = str(item[0]).strip().lower() if type(item[0]) is str else ""
            # A weekday's three letters or its whole name; `mondayish` or `t` is no weekday.
            name = word[:3] if word in full else word
            if name not in WEEKDAYS:
                raise FieldError(f"{_as_written(item)} is not a weekday", item[1], ", ".join(WEEKDAYS))
            picked.append(WEEKDAYS.index(name))
        days = tuple(sorted(set(picked)))
    holidays: list[str] = []
    if "holidays" in fields:
        raw = fields["holidays"]
        if type(raw[0]) is not list:
            raise FieldError("holidays must be a list of dates", raw[1], "write [2026-12-25, 2027-01-01]")
        bad: list[tuple[str, int]] = []
        for item in raw[0]:
            try:
                if type(item[0]) not in (str, int):
                    raise ValueError(item[0])
                holidays.append(dt.date.fromisoformat(str(item[0])).isoformat())
            except ValueError:
                bad.append((_as_written(item), item[1]))
        if bad:
            # Every one named at once: a list of holidays is typed in one go, and fixed in one go.
            what = f"holiday {bad[0][0]} is not a date" if len(bad) == 1 else \
                f"holidays {', '.join(t for t, _l in bad)} are not dates"
            raise FieldError(what, bad[0][1], "write YYYY-MM-DD")
    schedule = Schedule(cron, days, tuple(holidays))
    if not fires_on_business_days(schedule):
        names = ", ".join(WEEKDAYS[d] for d in days) or "none"
        raise FieldError(f"cron '{cron}' never fires on a business day ({names})", fields["cron"][1],
                         "check the cron's days and months against business_days")
    return schedule


def _as_written(item: Entry) -> str:
    """An item of a list as a message quotes it: a scalar as the plan writes it (`yes`, not YAML's true), else
    what it is (a list, nothing (null))."""
    value, _line, text = item
    return f"'{text}'" if text is not None and value is not None else describe(value)


def read_timezone(entry: Entry) -> str:
    """A `timezone` that the system's zone database knows."""
    # zoneinfo reads the zone database from disk: this is the core's one file reader.
    import zoneinfo

    zone = text_of(entry, "timezone")
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise FieldError(
            f"unknown time zone '{zone}'",
            entry[1],
            "use an IANA name such as Europe/London or America/New_York",
        ) from None
    return zone

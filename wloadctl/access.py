"""Who may do what: roles, the verbs each allows, and the mapping from Unix users and groups to roles.

Roles are ordered: viewer < operator < admin, each allowing what the ones below allow. The
mapping comes from a config file (`$WLOADCTL_HOME/roles.yaml`, else `/etc/wloadctl/roles.yaml`)
and from the plan's `roles:` section, which add up (the higher role wins):

    roles:
      admin:    {groups: [batchadm], users: [alice]}
      operator: {groups: [batchops]}
      viewer:   {groups: [staff]}
    four_eyes: [kill, set-ok]     # config file only: verbs that need a second person's approve

The run's owner (the uid that started it, i.e. the owner of its state directory) and root
are admins whatever the mapping says. Anybody else without a mapping has no role.

Callers through the broker are not Unix users of this host: `broker_users:` lists give roles
to broker users (the user the broker authenticated, see wloadctl.remote.operators). The
broker user the scheduler itself connects as owns the run there (an admin); any other broker
caller is a viewer unless listed. A caller the broker does not vouch for (no per-user
authentication) is `unauthenticated`, a viewer unless that name is listed:

    roles:
      operator: {broker_users: [alice]}
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wloadctl.errors import UsageError


class Role(enum.IntEnum):
    """An operator's role; a higher role allows everything a lower one does."""

    NONE = 0
    """No role: nothing is allowed."""
    VIEWER = 1
    """Reads: status, logs, why, the console read-only."""
    OPERATOR = 2
    """Steers jobs without losing work: hold, release, retry, rerun."""
    ADMIN = 3
    """Everything, including what ends or overrides work: kill, set-ok, skip, cancel, approve."""

    @property
    def label(self) -> str:
        """The role's name as written in config files and messages."""
        return self.name.lower()


VERB_ROLE: dict[str, Role] = {
    "ping": Role.VIEWER, "whoami": Role.VIEWER, "why": Role.VIEWER, "status": Role.VIEWER,
    "logs": Role.VIEWER, "console": Role.VIEWER, "pending": Role.VIEWER,
    "hold": Role.OPERATOR, "release": Role.OPERATOR, "retry": Role.OPERATOR, "rerun": Role.OPERATOR,
    "kill": Role.ADMIN, "set-ok": Role.ADMIN, "skip": Role.ADMIN, "cancel": Role.ADMIN, "approve": Role.ADMIN,
    "reject": Role.ADMIN,
}
"""The least role each verb needs; a verb not listed needs admin."""

ROLES_FILE = "roles.yaml"
"""File name of the roles config in $WLOADCTL_HOME or /etc/wloadctl."""


def needed(verb: str) -> Role:
    """The least role `verb` needs."""
    return VERB_ROLE.get(verb, Role.ADMIN)


def allowed_verbs(role: Role) -> list[str]:
    """The verbs `role` may use, in table order."""
    return [v for v, r in VERB_ROLE.items() if r <= role]


@dataclass
class RoleMap:
    """Unix users and groups to roles."""

    users: dict[str, Role] = field(default_factory=dict)
    """Role of each named user."""
    groups: dict[str, Role] = field(default_factory=dict)
    """Role of each member of a named group."""
    broker_users: dict[str, Role] = field(default_factory=dict)
    """Role of each broker user (`unauthenticated`: of callers the broker does not vouch for)."""
    source: list[str] = field(default_factory=list)
    """Where the mapping came from (files, the plan)."""
    four_eyes: set[str] = field(default_factory=set)
    """Verbs the config file's `four_eyes:` makes need a second person's approve in every run."""

    def merge(self, other: RoleMap) -> None:
        """Add another mapping; where both name someone, the higher role wins."""
        for mine, theirs in ((self.users, other.users), (self.groups, other.groups),
                             (self.broker_users, other.broker_users)):
            for k, r in theirs.items():
                mine[k] = max(mine.get(k, Role.NONE), r)
        self.source.extend(other.source)
        self.four_eyes |= other.four_eyes

    @property
    def grants_others(self) -> bool:
        """Whether anybody besides the owner is given a role (the control socket must then let them in)."""
        return bool(self.users or self.groups)

    def role_of(self, uid: int, user: str, groups: Iterable[str], owner_uid: int) -> Role:
        """The role of a caller: owner and root are admins, else the highest role mapped to them."""
        if uid in (0, owner_uid):
            return Role.ADMIN
        best = self.users.get(user, Role.NONE)
        for g in groups:
            best = max(best, self.groups.get(g, Role.NONE))
        return best

    def broker_role(self, user: str | None, owner: str | None) -> Role:
        """The role of a caller through the broker.

        Args:
            user: The broker user the broker vouches for; None when it vouches for nobody.
            owner: The broker user the scheduler connects as (None: it connects as nobody in particular).

        Returns:
            Admin for the owner; else the role `broker_users` gives the user (or `unauthenticated`),
            at least viewer.
        """
        if user is not None and owner is not None and user == owner:
            return Role.ADMIN
        return max(Role.VIEWER, self.broker_users.get(UNAUTHENTICATED if user is None else user, Role.NONE))


UNAUTHENTICATED = "unauthenticated"
"""The name of a caller through the broker that the broker does not vouch for (in audits and `broker_users`)."""
_HOST_DROP = re.compile(r"[^A-Za-z0-9_.:-]")


def unauthenticated_name(claimed: str) -> str:
    """`unauthenticated@HOST` for a request claiming to be `NAME@HOST` (the name is dropped, the host kept)."""
    host = _HOST_DROP.sub("", claimed.rpartition("@")[2])[:64] or "?"
    return f"{UNAUTHENTICATED}@{host}"


def parse_roles(obj: Any, where: str) -> RoleMap:
    """Read a `roles:` mapping (role -> {users: [...], groups: [...], broker_users: [...]}).

    Raises:
        UsageError: the mapping is malformed; the message names `where` and the bad entry.
    """
    out = RoleMap(source=[where])
    if obj is None:
        return out
    if not isinstance(obj, Mapping):
        raise UsageError(f"{where}: roles must be a mapping of role -> {{users, groups}}")
    names = {r.label: r for r in Role if r is not Role.NONE}
    for key, spec in obj.items():
        role = names.get(str(key))
        if role is None:
            raise UsageError(f"{where}: unknown role '{key}'", hint=f"roles: {', '.join(names)}")
        if not isinstance(spec, Mapping) or set(spec) - {"users", "groups", "broker_users"}:
            raise UsageError(f"{where}: role '{key}' takes a mapping with `users:`, `groups:` and/or "
                             "`broker_users:` lists")
        for kind, into in (("users", out.users), ("groups", out.groups), ("broker_users", out.broker_users)):
            vals = spec.get(kind) or []
            if isinstance(vals, str):
                vals = [vals]
            if not isinstance(vals, list):
                raise UsageError(f"{where}: {key}.{kind} must be a list of names")
            for v in vals:
                into[str(v)] = max(into.get(str(v), Role.NONE), role)
    return out


def parse_four_eyes(obj: Any, where: str) -> set[str]:
    """A roles file's `four_eyes:` list of verbs that need a second person's approve.

    Raises:
        UsageError: not a list of known verbs; the message names `where` and the bad entry.
    """
    from wloadctl.core.verbs import FOUR_EYES_VERBS

    hint = f"verbs: {', '.join(FOUR_EYES_VERBS)}"
    if not isinstance(obj, list):
        raise UsageError(f"{where}: four_eyes must be a list of verbs", hint=hint)
    for v in obj:
        if v not in FOUR_EYES_VERBS:
            raise UsageError(f"{where}: four_eyes: unknown verb '{v}'", hint=hint)
    return {str(v) for v in obj}


def config_paths() -> list[Path]:
    """Where roles config files are looked for, in order."""
    home = os.environ.get("WLOADCTL_HOME")
    paths = [Path(home) / ROLES_FILE] if home else []
    paths.append(Path("/etc/wloadctl") / ROLES_FILE)
    return paths


def load_roles(plan_roles: Any = None, plan_path: str = "plan") -> RoleMap:
    """The role mapping from the config file (the first that exists) and the plan's `roles:` section.

    Raises:
        UsageError: a config file is not valid YAML or its mapping is malformed.
    """
    import yaml

    out = RoleMap()
    for p in config_paths():
        if not p.is_file():
            continue
        try:
            doc = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError, OSError) as exc:
            raise UsageError(f"{p}: not a readable YAML roles file: {str(exc).splitlines()[0]}") from None
        body = doc.get("roles") if isinstance(doc, dict) and "roles" in doc else doc
        if isinstance(body, dict) and body is doc:
            body = {k: v for k, v in body.items() if k != "four_eyes"}  # the file is the mapping, besides four_eyes
        out.merge(parse_roles(body, str(p)))
        if isinstance(doc, dict) and "four_eyes" in doc:
            out.four_eyes |= parse_four_eyes(doc["four_eyes"], str(p))
        break
    if plan_roles is not None:
        out.merge(parse_roles(plan_roles, f"{plan_path}: roles"))
    return out


def refusal(verb: str, user: str, role: Role) -> str:
    """The one-line message of a refused verb: it names the role needed."""
    have = role.label if role is not Role.NONE else "no role"
    return f"{verb} needs the {needed(verb).label} role; {user} has {have}"

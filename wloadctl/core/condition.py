"""Conditions of `if` and `until`: a small, safe expression language over upstream results and plan variables."""

from __future__ import annotations

import ast
import difflib
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wloadctl.core.planvalues import key_hint
from wloadctl.core.states import JobState

_CMP: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
NAMES = ("jobs", "vars", "result", "exit_code", "iteration")
JOB_FIELDS = ("exit_code", "state", "result")
"""What an expression may read of a job: `jobs.NAME.exit_code`, `.state` (its state's name) and `.result.KEY`."""
OWN_NAMES = ("result", "exit_code", "iteration")
"""Names of an `until` job's own outcome: only an `until` has them."""
MAX_DEPTH = 100
"""Deepest nesting of an expression (`not not ...`, `a.b.c...`): evaluation recurses once per level."""
"""Names an expression may use: jobs["id"].exit_code / .state / .result.KEY, vars.NAME, and for `until`
the job's own result, exit_code and iteration."""


class ConditionError(ValueError):
    """An expression that is not allowed or cannot be evaluated."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        """What would be accepted, when the message alone does not say."""


class Record:
    """Attribute access over a mapping; a missing key reads as None."""

    __slots__ = ("_m",)

    def __init__(self, m: Mapping[str, Any]) -> None:
        self._m = m

    def get(self, key: str) -> Any:
        v = self._m.get(key)
        return Record(v) if isinstance(v, Mapping) else v


@dataclass(frozen=True, slots=True)
class Condition:
    """A parsed expression and the upstream jobs it reads."""

    text: str
    """As written in the plan."""
    tree: ast.Expression
    """The checked syntax tree."""
    jobs: frozenset[str]
    """Job ids it reads through `jobs[...]` / `jobs.NAME`."""
    own: frozenset[str] = frozenset()
    """Names of the job's own outcome it reads (OWN_NAMES): only an `until` may."""
    vars: frozenset[str] = frozenset()
    """Plan variables it reads through `vars.NAME` / `vars["NAME"]`."""

    def evaluate(self, jobs: Mapping[str, Mapping[str, Any]], variables: Mapping[str, Any],
                 own: Mapping[str, Any] | None = None) -> bool:
        """True when the condition holds.

        Raises:
            ConditionError: a comparison of incompatible values, or an unknown job.
        """
        return bool(self.value(jobs, variables, own))

    def value(self, jobs: Mapping[str, Mapping[str, Any]], variables: Mapping[str, Any],
              own: Mapping[str, Any] | None = None) -> Any:
        """What the expression evaluates to (a list for `for_each`; a mapping comes back as a Record).

        Raises:
            ConditionError: a comparison of incompatible values, or an unknown job.
        """
        env: dict[str, Any] = {"jobs": Record(jobs), "vars": Record(variables)}
        if own is not None:
            env.update(result=Record(own.get("result") or {}), exit_code=own.get("exit_code"),
                       iteration=own.get("iteration"))
        try:
            return _eval(self.tree.body, env)
        except ConditionError:
            raise
        except (TypeError, ValueError, KeyError) as e:
            raise ConditionError(f"cannot evaluate '{self.text}': {e}") from None


def parse_condition(text: str) -> Condition:
    """Parse and check an expression.

    Raises:
        ConditionError: a syntax error, a construct outside the language (calls, lambdas, imports...),
            or a job field other than JOB_FIELDS.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ConditionError(f"'{_quoted(text)}' is not a valid expression: {e.msg}") from None
    except (RecursionError, MemoryError):
        # Python's parser gives up on a few thousand levels (MemoryError is its
        # "stack overflowed"), long before a plan could mean them.
        raise ConditionError(f"'{_quoted(text)}' is nested too deeply (at most {MAX_DEPTH} levels)") from None
    depth = _depth(tree)
    if depth > MAX_DEPTH:
        raise ConditionError(f"'{_quoted(text)}' is nested {depth} levels deep (at most {MAX_DEPTH})")
    jobs: set[str] = set()
    own: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in OWN_NAMES:
            own.add(node.id)
        _check_job_field(node, text)
        if isinstance(node, ast.Name) and node.id not in NAMES:
            spelled = {"true": "True", "false": "False", "null": "None", "none": "None"}.get(node.id)
            raise ConditionError(f"'{_quoted(text)}': unknown name '{node.id}' (use {', '.join(NAMES)}"
                                 + (f"; {spelled} is written so" if spelled else "") + ")")
        if not isinstance(node, _ALLOWED):
            raise ConditionError(f"'{_quoted(text)}': {type(node).__name__.lower()} is not allowed in a condition")
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "jobs":
            if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
                raise ConditionError(f"'{_quoted(text)}': write jobs[\"id\"] with a literal job id")
            jobs.add(node.slice.value)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "jobs":
            jobs.add(node.attr)
        name = _variable(node)
        if name is not None:
            names.add(name)
    return Condition(text, tree, frozenset(jobs), frozenset(own), frozenset(names))


def _variable(node: ast.AST) -> str | None:
    """The plan variable a node reads (`vars.NAME`, `vars["NAME"]`), or None."""
    if not (isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.value, ast.Name)
            and node.value.id == "vars"):
        return None
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.slice.value if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str) else None


def _check_job_field(node: ast.AST, text: str) -> None:
    """A field read of a job (`jobs.a.X`, `jobs["a"].X`, `jobs.a["X"]`) must name one of JOB_FIELDS.

    Any other reads None whatever the job did, so a typo (`exitcode`, `status`) would
    silently turn a branch off.
    """
    found = job_field(node)
    if found is None or found[1] in JOB_FIELDS:
        return
    field = found[1]
    raise ConditionError(f"'{_quoted(text)}': a job has no field {field!r}",
                         key_hint(str(field), JOB_FIELDS))


STATE_NAMES = tuple(s.name for s in JobState)
"""What `jobs.NAME.state` reads: the upper-case name of the job's state."""
_EQUALITY = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
_STATE_WORDS = {"SUCCESS": "SUCCEEDED", "SUCCESSFUL": "SUCCEEDED", "COMPLETED": "SUCCEEDED", "COMPLETE": "SUCCEEDED",
                "DONE": "SUCCEEDED", "OK": "SUCCEEDED", "PASSED": "SUCCEEDED", "FAILURE": "FAILED", "ERROR": "FAILED",
                "TIMEOUT": "TIMED_OUT", "CANCELED": "CANCELLED", "PENDING": "WAITING"}
"""Other schedulers' names of states, for the did-you-mean."""


def job_field(node: ast.AST) -> tuple[str, str] | None:
    """(job id, field) when a node reads a field of a job (`jobs.a.state`, `jobs["a"].exit_code`), else None."""
    if isinstance(node, ast.Attribute):
        field: Any = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        field = node.slice.value
    else:
        return None
    job = node.value
    if not (isinstance(job, (ast.Attribute, ast.Subscript)) and isinstance(job.value, ast.Name)
            and job.value.id == "jobs"):
        return None
    if isinstance(job, ast.Attribute):
        return job.attr, str(field)
    name = job.slice.value if isinstance(job.slice, ast.Constant) else None
    return (name, str(field)) if isinstance(name, str) else None


def check_comparisons(cond: Condition) -> None:
    """Refuse a comparison of a job's state or exit_code with a literal it can never equal.

    A plan's validation calls it (parse_condition does not: a plan already journaled is run as it was).

    Raises:
        ConditionError: the first such comparison, with the closest state name.
    """
    for node in ast.walk(cond.tree):
        if isinstance(node, ast.Compare):
            _check_compare(node, cond.text)


def _check_compare(node: ast.Compare, text: str) -> None:
    """A comparison of a job's state or exit_code with a literal that it can never equal.

    A state is the upper-case name of a JobState ('SUCCEEDED'), an exit_code a number (or nothing): `state ==
    'SUCCESS'` or `exit_code == "0"` is false whatever the job did, and would silently skip the job.
    """
    sides = [node.left, *node.comparators]
    for k, op in enumerate(node.ops):
        for read, other in ((sides[k], sides[k + 1]), (sides[k + 1], sides[k])):
            found = job_field(read)
            if found is None or found[1] not in ("state", "exit_code"):
                continue
            listed = isinstance(op, (ast.In, ast.NotIn))
            if listed and (read is not sides[k] or not isinstance(other, (ast.List, ast.Tuple))):
                continue  # (`'FAIL' in jobs.a.state` tests a part of the name)
            if not listed and not isinstance(op, _EQUALITY) and found[1] == "state":
                raise ConditionError(f"'{_quoted(text)}': a state is a name, it has no order",
                                     "compare it with == or != (or 'in [...]')")
            values = other.elts if listed else [other]  # type: ignore[attr-defined]
            for value in values:
                if isinstance(value, ast.Constant) and value.value is not None:
                    _check_literal(found[0], found[1], value.value, text)


def _check_literal(job: str, field: str, value: Any, text: str) -> None:
    """Refuse a literal that a job's `field` never equals."""
    if field == "exit_code":
        if isinstance(value, str):
            raise ConditionError(f"'{_quoted(text)}': jobs.{job}.exit_code is a number, never the text {value!r}",
                                 f"write it without quotes: jobs.{job}.exit_code == {value.strip()}")
        return
    if isinstance(value, str) and value in STATE_NAMES:
        return
    word = str(value).upper().replace(" ", "_")
    close = [word] if word in STATE_NAMES else [_STATE_WORDS[word]] if word in _STATE_WORDS else \
        difflib.get_close_matches(word, STATE_NAMES, n=1, cutoff=0.5)
    guess = f"did you mean '{close[0]}'? " if close else ""
    raise ConditionError(f"'{_quoted(text)}': a job's state is never {value!r}",
                         f"{guess}states: {', '.join(STATE_NAMES)}")


def _quoted(text: str) -> str:
    """An expression as messages quote it: a long one is cut, so the message stays one readable line."""
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _depth(tree: ast.AST) -> int:
    """How many expressions deep the tree nests, counted without recursion (a deep tree is what this guards
    against)."""
    deepest, stack = 0, [(tree, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, ast.expr):
            d += 1
            deepest = max(deepest, d)
        stack.extend((child, d) for child in ast.iter_child_nodes(node))
    return deepest


_ALLOWED = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare,
            ast.Constant, ast.Name, ast.Load, ast.Attribute, ast.Subscript, ast.List, ast.Tuple,
            *_CMP.keys())


def _eval(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BoolOp):
        vals = (_eval(v, env) for v in node.values)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, env)
            if left is None or right is None:
                if not isinstance(op, (ast.Eq, ast.NotEq)):
                    return False  # a missing value satisfies no ordering
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Attribute):
        base = _eval(node.value, env)
        return base.get(node.attr) if isinstance(base, Record) else None
    if isinstance(node, ast.Subscript):
        base = _eval(node.value, env)
        key = _eval(node.slice, env)
        if isinstance(base, Record):
            return base.get(key)
        try:
            return base[key] if base is not None else None
        except (IndexError, KeyError, TypeError):
            return None
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, env) for e in node.elts]
    raise ConditionError(f"{type(node).__name__} is not allowed")  # pragma: no cover - checked at parse

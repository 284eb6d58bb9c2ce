"""Conditions of `if` and `until`: a small, safe expression language over upstream results and plan variables."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wloadctl.core.planvalues import key_hint

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
    if isinstance(node, ast.Attribute):
        field = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        field = node.slice.value
    else:
        return
    job = node.value
    if not (isinstance(job, (ast.Attribute, ast.Subscript)) and isinstance(job.value, ast.Name)
            and job.value.id == "jobs") or field in JOB_FIELDS:
        return
    raise ConditionError(f"'{_quoted(text)}': a job has no field {field!r}",
                         key_hint(str(field), JOB_FIELDS))


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

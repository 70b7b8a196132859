"""The CEL rules of a CRD (``x-kubernetes-validations``), evaluated offline with cel-python.

kube-apiserver evaluates each rule with ``self`` bound to the value at the
rule's place in the schema, after defaulting; a rule that is false, or that
fails to evaluate, rejects the object with the rule's message. cel-python
implements standard CEL (operators, ``has``, the ``all``/``exists``/``map``/
``filter`` macros, ``size``, ``matches``, ``startsWith``, …) but not the
libraries Kubernetes adds (``quantity``, ``url``, ``ip``, the strings and
lists extensions, ``format``, optionals). A rule that calls one of those, or
refers to ``oldSelf`` (a transition rule, which needs the stored object), is
not guessed at: it is reported as *not evaluable*, and validation fails
closed on it. ``unevaluable()`` names such rules before anything is checked,
so a test can pin the list for the CRDs racklife ships (today it is empty).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, base_functions

from lifecycle.drivers.kube.manifests.objects import path_str

Path = tuple[str | int, ...]
Problem = tuple[str, str]

# CEL's macros: cel-python expands them itself, they are not in its function table.
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter", "dyn"})
_CALLS = ("ident_arg", "member_dot_arg", "dot_ident_arg")


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry, and where in the schema it sits."""

    schema_path: str
    rule: str
    message: str | None = None
    message_expression: str | None = None
    field_path: str | None = None
    reason: str | None = None


def rules_of(schema: dict[str, Any], path: Path = ()) -> Iterator[Rule]:
    """Every rule in a schema, outermost first."""
    for entry in schema.get("x-kubernetes-validations") or []:
        yield Rule(path_str(path), entry["rule"], entry.get("message"), entry.get("messageExpression"),
                   entry.get("fieldPath"), entry.get("reason"))
    for key, sub in (schema.get("properties") or {}).items():
        yield from rules_of(sub, (*path, key))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from rules_of(schema["additionalProperties"], (*path, "*"))
    if isinstance(schema.get("items"), dict):
        yield from rules_of(schema["items"], (*path, "*"))


@cache
def _environment() -> celpy.Environment:
    return celpy.Environment()


@cache
def _compiled(expr: str) -> tuple[Any, str | None]:
    """The compiled AST, or why the expression cannot be evaluated here."""
    try:
        ast = _environment().compile(expr)
    except CELParseError as exc:
        return None, f"does not compile: {str(exc).splitlines()[0]}"
    known = set(base_functions) | _MACROS
    missing = sorted({
        str(tree.children[0] if tree.data != "member_dot_arg" else tree.children[1])
        for tree in ast.iter_subtrees() if tree.data in _CALLS
    } - known)
    idents = {str(tok) for tok in ast.scan_values(lambda t: isinstance(t, lark.Token) and t.type == "IDENT")}
    if "oldSelf" in idents:
        return ast, "is a transition rule (oldSelf): it needs the stored object, which an offline check has not"
    if missing:
        return ast, f"calls {', '.join(missing)}, a Kubernetes CEL extension cel-python does not implement"
    return ast, None


def unevaluable(schema: dict[str, Any]) -> list[tuple[Rule, str]]:
    """The rules of a schema that cannot be evaluated offline, and why (compile errors included)."""
    found = []
    for rule in rules_of(schema):
        for expr in (rule.rule, rule.message_expression):
            if expr is not None and (why := _compiled(expr)[1]):
                found.append((rule, why))
    return found


def _evaluate(expr: str, value: Any) -> Any:
    ast, why = _compiled(expr)
    if why:
        raise ValueError(why)
    program = _environment().program(ast)
    return program.evaluate({"self": json_to_cel(value)})


def _check(rule: Rule, value: Any, path: Path) -> Problem | None:
    where = path_str(path) + (rule.field_path or "")
    try:
        result = _evaluate(rule.rule, value)
    except (CELEvalError, ValueError, TypeError) as exc:
        return (where, f"Invalid value: rule {rule.rule!r} cannot be evaluated, so the object is refused: "
                       f"{str(exc).splitlines()[0][:200]}")
    if isinstance(result, celtypes.BoolType) and bool(result):
        return None
    if not isinstance(result, celtypes.BoolType):
        return (where, f"Invalid value: rule {rule.rule!r} gave {type(result).__name__}, not a boolean")
    message = rule.message or f"failed rule: {rule.rule}"
    if rule.message_expression:
        # The API server also falls back to the static message when the expression fails.
        with contextlib.suppress(CELEvalError, ValueError, TypeError):
            message = str(_evaluate(rule.message_expression, value))
    reason = rule.reason or "Invalid"
    return (where, f"{reason}: {message}" if reason != "Invalid" else f"Invalid value: {message}")


def check_rules(value: Any, schema: dict[str, Any], path: Path = ()) -> list[Problem]:
    """Evaluate every rule against the (defaulted) object; a false or failing rule is a problem."""
    found: list[Problem] = []
    if value is None:
        return found
    for entry in schema.get("x-kubernetes-validations") or []:
        rule = Rule(path_str(path), entry["rule"], entry.get("message"), entry.get("messageExpression"),
                    entry.get("fieldPath"), entry.get("reason"))
        if (problem := _check(rule, value, path)) is not None:
            found.append(problem)
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                found += check_rules(item, sub, (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += check_rules(item, schema["items"], (*path, i))
    return found

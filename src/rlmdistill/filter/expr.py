"""The safe expression language of ``where`` rules (no ``eval`` of user text).

An expression is one Python-syntax expression over episode fields
(:data:`rlmdistill.filter.fields.EPISODE_FIELDS`), e.g.
``n_sub_calls >= 2 and coverage > 0.3 and startswith(room_id, "cuad")`` (attribute access
such as ``room_id.startswith`` is refused). Two layers keep it safe:

1. :func:`compile_expression` parses the text with :mod:`ast` and accepts only a whitelist of
   node types: constants (str, int, float, bool, None), names of episode fields, tuples/lists
   of those, ``and``/``or``/``not``, arithmetic (``+ - * / // % **``), comparisons (``== != <
   <= > >= in not in is is not``), ``x if c else y``, and calls of the whitelisted functions
   in :data:`FUNCTIONS` by name. Attribute access, subscripts, lambdas, comprehensions,
   assignment (``:=``), starred arguments and keyword arguments are refused, and so is any
   name that is not a field or function (``__import__``, ``open``, dunder names...).
2. Evaluation goes through ``simpleeval`` (which itself refuses dunder attributes,
   unknown functions and huge powers/strings) over a fresh ``{field: value}`` mapping.

Errors are :class:`ExpressionError` and name the expression; unknown names also list the
available fields and functions.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simpleeval import EvalWithCompoundTypes, InvalidExpression

__all__ = [
    "FUNCTIONS",
    "ExpressionError",
    "WhereExpression",
    "compile_expression",
    "false_expressions",
]


class ExpressionError(ValueError):
    """A ``where`` expression is invalid, unsafe, or failed on an episode (message names it)."""


def _lower(s: str) -> str:
    return str(s).lower()


def _startswith(s: str, prefix: str) -> bool:
    return str(s).startswith(prefix)


def _endswith(s: str, suffix: str) -> bool:
    return str(s).endswith(suffix)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "len": len,
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "lower": _lower,
    "startswith": _startswith,
    "endswith": _endswith,
}
"""The only callables an expression may use, called by name with positional arguments."""

_ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Is,
    ast.IsNot,
    ast.IfExp,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Tuple,
    ast.List,
)


@dataclass(frozen=True)
class WhereExpression:
    """A checked expression, ready to evaluate on many episodes.

    ``names``: the episode fields it reads. Build with :func:`compile_expression`.
    """

    text: str
    names: frozenset[str]
    node: ast.expr

    def evaluator(self) -> EvalWithCompoundTypes:
        """A ``simpleeval`` evaluator with the whitelisted functions, reusable across
        :meth:`evaluate` calls (building one costs more than evaluating a short expression)."""
        return EvalWithCompoundTypes(functions=FUNCTIONS, names={})

    def evaluate(
        self,
        values: Mapping[str, Any],
        *,
        episode: str = "?",
        evaluator: EvalWithCompoundTypes | None = None,
    ) -> bool | None:
        """Truth value of the expression on one episode's ``{field: value}``.

        Returns ``None`` (neither kept nor an error) when evaluation failed with a
        ``TypeError`` while a field the expression reads is ``None`` for this episode (e.g.
        ``coverage > 0.5`` on an episode without coverage); callers treat that as "rule not
        met". Any other failure raises :class:`ExpressionError` naming the expression and
        ``episode``. ``evaluator``: one from :meth:`evaluator`, to reuse over many episodes.
        """
        names = {name: values[name] for name in self.names}
        if evaluator is None:
            evaluator = self.evaluator()
        evaluator.names = names
        try:
            return bool(evaluator.eval(self.text, previously_parsed=self.node))
        except TypeError as exc:
            if any(v is None for v in names.values()):
                return None
            raise ExpressionError(
                f"where expression {self.text!r} failed on episode {episode}: {exc}"
            ) from exc
        except (InvalidExpression, ArithmeticError, ValueError) as exc:
            raise ExpressionError(
                f"where expression {self.text!r} failed on episode {episode}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def _available(fields: Mapping[str, str]) -> str:
    return (
        f"available fields: {', '.join(sorted(fields))}; functions: {', '.join(sorted(FUNCTIONS))}"
    )


def compile_expression(text: str, fields: Mapping[str, str]) -> WhereExpression:
    """Parse and check ``text`` against the whitelist (see the module docstring).

    ``fields``: the names an expression may read (name -> meaning). Raises
    :class:`ExpressionError` naming the expression for a syntax error, a refused construct
    (attribute access, subscript, lambda, comprehension, keyword argument, ...), a call of
    anything but a whitelisted function, or an unknown name (listing the available fields).
    """
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError(f"where expression {text!r} is empty")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"where expression {text!r} is not valid: {exc.msg}") from exc
    names: set[str] = set()
    nodes = list(ast.walk(tree))
    for node in nodes:
        if not isinstance(node, _ALLOWED_NODES):
            what = type(node).__name__
            hint = " (use a function, e.g. startswith(room_id, 'x'))" if what == "Attribute" else ""
            raise ExpressionError(
                f"where expression {text!r}: {what} is not allowed{hint}; "
                "allowed: fields, constants, and/or/not, arithmetic, comparisons, "
                "x if c else y, tuples/lists and calls of whitelisted functions"
            )
        if isinstance(node, ast.Constant) and not isinstance(
            node.value, str | int | float | bool | type(None)
        ):
            raise ExpressionError(
                f"where expression {text!r}: constant {node.value!r} is not allowed"
            )
    for node in nodes:
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                called = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
                raise ExpressionError(
                    f"where expression {text!r}: calling {called!r} is not allowed; "
                    f"{_available(fields)}"
                )
            if node.keywords:
                raise ExpressionError(
                    f"where expression {text!r}: keyword arguments are not allowed"
                )
        if isinstance(node, ast.Name):
            if node.id in FUNCTIONS:
                continue
            if node.id not in fields:
                raise ExpressionError(
                    f"where expression {text!r}: unknown name {node.id!r}; {_available(fields)}"
                )
            names.add(node.id)
    # A function name is only allowed as the callee of a call, never as a bare value.
    callees = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    for n in nodes:
        if isinstance(n, ast.Name) and n.id in FUNCTIONS and id(n) not in callees:
            raise ExpressionError(f"where expression {text!r}: function {n.id!r} must be called")
    return WhereExpression(text=text, names=frozenset(names), node=tree.body)


def false_expressions(
    expressions: Sequence[WhereExpression],
    evaluators: Sequence[EvalWithCompoundTypes],
    values: Mapping[str, Any],
    where: str,
) -> list[str]:
    """The expressions that do not hold for ``values`` (``where`` names the episode or
    sub-call in errors), as the filter reports them: ``'text'`` when false, ``'text' (no
    value: a, b)`` when a name it reads has no value. ``evaluators`` pair with
    ``expressions`` (:meth:`WhereExpression.evaluator`)."""
    false = []
    for expr, evaluator in zip(expressions, evaluators, strict=True):
        result = expr.evaluate(values, episode=where, evaluator=evaluator)
        if result is None:
            nones = sorted(n for n in expr.names if values[n] is None)
            false.append(f"{expr.text!r} (no value: {', '.join(nones)})")
        elif not result:
            false.append(repr(expr.text))
    return false

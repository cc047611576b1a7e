"""Tools the text tasks execute for the model: a safe calculator.

`calculate` walks the expression's syntax tree and allows numbers, + - * /, unary signs and parentheses,
nothing else: no names, calls, attributes or `**`, so `__import__('os')` is refused before anything runs
(it never reaches `eval`). Arithmetic is exact (fractions), so 10/4*2 is 5, not 5.000000000000001.
"""

from __future__ import annotations

import ast
import math
import operator
from fractions import Fraction

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
ALLOWED = "numbers, + - * / and parentheses"


class ToolError(ValueError):
    """A tool call the tool refuses; the message is shown to the model."""


def calculate(expression: str, max_chars: int = 200) -> Fraction:
    """The exact value of an arithmetic expression; a ToolError saying why for anything else."""
    if len(expression) > max_chars:
        raise ToolError(f"the expression is longer than {max_chars} characters")
    text = expression.replace("×", "*").replace("÷", "/").replace("^", "**")  # ** is then refused, with a reason
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # MemoryError: the parser's nesting limit
        raise ToolError(f"{expression!r} is not an arithmetic expression; use only {ALLOWED}") from None
    return _value(tree.body, expression)


def _value(node: ast.AST, expression: str) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):  # type(): bool is refused
        if not math.isfinite(node.value):  # 1e999 parses as inf
            raise ToolError(f"{node.value} is too large")
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand, expression))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, expression), _value(node.right, expression)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ToolError("division by zero")
        return _BINARY[type(node.op)](left, right)
    raise ToolError(f"{expression!r} is not an arithmetic expression; use only {ALLOWED}")


def format_number(value: Fraction) -> str:
    """An integer as is ("8272"); anything else as a decimal with up to 10 significant digits ("3.333333333")."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.10g}"


def parse_number(text: str) -> Fraction | None:
    """A number the model wrote ("84", "-3", "1.25", "1,000"), exactly; None if `text` is not one."""
    text = text.replace(",", "").strip()
    if not text or "/" in text or "_" in text:  # Fraction would also read "3/4" and "1_000"
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None

"""What a DRA selector's text and parse tree are checked for before it ever runs.

Kubernetes type-checks a selector when its object is written; cel-python does not,
and would instead fail it on every device at run time, or (for a deep nesting)
exhaust Python's stack while parsing.  So the checks that need no device are made
here once, on the text and on the parse tree: a bound on length and nesting, the
names it reads (only ``device``), integer literals in range, and a result that is
plainly not a bool.  :mod:`.dracel` compiles and runs what passes.
"""

from __future__ import annotations

import lark

from queue_controller.errors import shown

__all__ = [
    "MAX_SELECTOR_CHARS",
    "MAX_SELECTOR_NESTING",
    "reads",
    "static_problem",
    "too_deep",
    "undeclared",
]

# Macros that bind their first argument as a variable for the rest.
_BINDING_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Type names a selector may use as values (`type(x) == int`).
_TYPE_NAMES = frozenset(
    {"bool", "bytes", "double", "duration", "int", "list", "map", "null_type", "string"}
    | {"timestamp", "type", "uint"}
)


def undeclared(tree: lark.Tree[lark.Token]) -> list[str]:
    """Names the expression reads that are not declared.

    Kubernetes type-checks a selector against its one variable, ``device``, so
    ``devce.driver`` is rejected when the object is written; cel-python does
    not check, and would fail it on every device at run time instead.
    """
    bound: set[str] = set()
    for call in tree.find_data("member_dot_arg"):
        if len(call.children) == 3 and str(call.children[1]) in _BINDING_MACROS:
            arguments = call.children[2]
            first = arguments.children[0] if isinstance(arguments, lark.Tree) else None
            if isinstance(first, lark.Tree):
                leaves = list(first.scan_values(lambda v: isinstance(v, lark.Token)))
                if len(leaves) == 1:  # a bare name, `x` of `l.all(x, x > 1)`
                    bound.add(str(leaves[0]))
    names = [str(node.children[0]) for node in tree.find_data("ident")]
    allowed = {"device"} | bound | _TYPE_NAMES
    return sorted({name for name in names if name not in allowed})


# Calls that see a whole map (its keys or its size), not the names spelled out.
_WHOLE_MAP_CALLS = _BINDING_MACROS | {"size"}


def _unquoted(token: str) -> str:
    """A CEL string literal's text, near enough to match the names it spells."""
    body = token.lstrip("rRbB")
    for quote in ('"""', "'''", '"', "'"):
        if body.startswith(quote) and body.endswith(quote) and len(body) >= 2 * len(quote):
            return body[len(quote) : -len(quote)]
    return body


def reads(tree: lark.Tree[lark.Token]) -> frozenset[str] | None:
    """The names a selector can read (see :attr:`Selector.reads`); None: any."""
    for node in tree.iter_subtrees():
        if node.data in ("member_dot_arg", "ident_arg"):
            callee = node.children[1] if node.data == "member_dot_arg" else node.children[0]
            if str(callee) in _WHOLE_MAP_CALLS:
                return None
        elif node.data == "member_index":
            index = node.children[1]
            literals = (
                list(index.scan_values(lambda v: isinstance(v, lark.Token)))
                if isinstance(index, lark.Tree)
                else [index]
            )
            if len(literals) != 1 or literals[0].type != "STRING_LIT":
                return None
        elif node.data in ("addition_add", "multiplication_mul"):
            return None
    names: set[str] = set()
    for token in tree.scan_values(lambda v: isinstance(v, lark.Token)):
        text = str(token)
        names.add(_unquoted(text) if token.type == "STRING_LIT" else text)
    return frozenset(names)


_LITERAL_TYPES = {
    "INT_LIT": "int",
    "UINT_LIT": "uint",
    "FLOAT_LIT": "double",
    "STRING_LIT": "string",
    "MLSTRING_LIT": "string",
    "BYTES_LIT": "bytes",
    "NULL_LIT": "null",
}
_INT_RANGES = {"INT_LIT": (-(2**63), 2**63 - 1), "UINT_LIT": (0, 2**64 - 1)}


def static_problem(tree: lark.Tree[lark.Token]) -> str:
    """What the API's type check would refuse that can be seen without running it.

    An integer literal out of range (cel-go: "invalid int literal"; cel-python
    keeps any size, and Python refuses to even print one of 5,000 digits), and
    a selector that is one literal, list or map, which is never a bool.  Any
    other non-bool result is only seen when it runs (:meth:`Selector.evaluate`).
    """
    for token in tree.scan_values(lambda v: isinstance(v, lark.Token)):
        bounds = _INT_RANGES.get(token.type)
        if bounds is None:
            continue
        digits = str(token).lower().rstrip("u").lstrip("+-")
        base = 16 if digits.startswith("0x") else 10
        # Anything longer cannot be in range; int() is kept to short runs of digits.
        if (
            len(digits) > 21
            or not bounds[0] <= int(str(token).lower().rstrip("u"), base) <= bounds[1]
        ):
            return f"integer literal {shown(str(token)[:30])} is out of range"
    node = tree
    while True:
        subtrees = [c for c in node.children if isinstance(c, lark.Tree)]
        if node.data in ("list_lit", "map_lit"):
            return f"must evaluate to bool, not {node.data.removesuffix('_lit')}"
        if node.data == "literal" and len(node.children) == 1:
            literal = node.children[0]
            kind = _LITERAL_TYPES.get(getattr(literal, "type", ""))
            return f"must evaluate to bool, not {kind}" if kind else ""
        if len(node.children) != 1 or len(subtrees) != 1:
            return ""
        node = subtrees[0]


# The API server's limit on a DRA CEL selector (resource.k8s.io's
# CELSelectorExpressionMaxLength, 10 Ki), checked before anything is parsed.
MAX_SELECTOR_CHARS = 10 * 1024
# Nesting (brackets, and runs of unary ! or -) past which cel-python's recursive
# parser and tree walks exhaust Python's stack ("(" * 5000 took 14 s, then a
# RecursionError); 200 levels measured 1.2 s to compile, so the bound is well below.
MAX_SELECTOR_NESTING = 32


def too_deep(expression: str) -> bool:
    """Whether brackets or unary operators nest past the bound (string literals skipped)."""
    depth = run = 0
    quote = ""
    for char in expression:
        if quote:
            quote = "" if char == quote else quote
            continue
        if char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        run = run + 1 if char in "!-" else (run if char.isspace() else 0)
        if depth > MAX_SELECTOR_NESTING or run > MAX_SELECTOR_NESTING:
            return True
    return False

"""The `--where` language: examples, strictness (one-line errors naming the valid choices), and a property test
of the parser against a plain Python evaluator of the same grammar, written here from its documentation."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import InvalidFilter
from ledger.store.filters import parse
from schemas import Receipt, Workload

R = Receipt(run_uuid="u", status="failed", name="fp8-run", tags={"sweep": "lr"},
            workload=Workload.model_validate({"seed": 3, "precision": {"compute": "fp8"}, "model": {"num_experts": 8},
                                              "arguments": {"lr": "3e-3", "opt": "adamw"}}),
            ).model_dump(mode="json")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("status=failed", True),
        ("status!=failed", False),
        ("precision=fp8 and experts>=8", True),
        ("precision==fp8", True),  # == is =, never the value '=fp8'
        ("experts>8", False),
        ("seed=3, tag.sweep=lr", True),
        ("name~fp8-*", True),
        ("name~*bf16*", False),
        ("name!~*bf16*", True),
        ("tag.missing=x", False),
        ("tag.missing!=x", True),  # a missing value is null: != anything else
        ("workload.router.capacity_factor=null", True),
        ("workload.router.capacity_factor!=null", False),
        ("name='fp8-run'", True),
        ("precision=bf16 or precision=fp8", True),
        ("precision=bf16 or experts<8", False),
        ("precision in (bf16, fp8)", True),
        ("precision not in (bf16, fp8)", False),
        ("status in (succeeded, imported)", False),
        ("not (precision=bf16 or seed=4)", True),
        ("(precision=bf16 or seed=3) and tag.sweep=lr", True),
        ("precision=bf16 or seed=3 and tag.sweep=x", False),  # and binds first
        ("param.lr=0.003", True),  # arguments are text: numbers when both sides are numbers
        ("param.lr<1e-2", True),
        ("workload.arguments.lr>=3e-3", True),
        ("param.opt~adam*", True),
        ("param.opt<5", False),  # a word is never ordered against a number
        ("archived=false", True),
        ("steps>=0 and loss=null", True),
        ("started=null or started>2020-01-01", True),
    ],
)
def test_conditions(expr: str, expected: bool) -> None:
    assert parse(expr)(R) is expected


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("", "empty --where"),
        ("nofield=1", "unknown field 'nofield'"),
        ("sumary.final_loss<3", "did you mean summary.final_loss"),
        ("name", "expected KEY OP VALUE, an operator after 'name'"),
        ("a==b==c", "unknown field 'a'"),
        ("name='unclosed", "unclosed quote"),
        ("name=two words", "expected 'and', 'or' or the end"),
        ("precision=>bf16", "unknown operator '=>'"),
        ("loss<>3", "unknown operator '<>'"),
        ("summary.final_loss<abc", "summary.final_loss in --where is a number and 'abc' is not one"),
        ("status=faild", "one of: succeeded, failed, interrupted, imported"),
        ("status<failed", "has no order"),
        ("stack.code.dirty=yes", "true or false"),
        ("experts~8*", "~ in --where matches text"),
        ("loss<null", "null in --where takes = or != only"),
        ("(precision=bf16", "expected ')'"),
        ("precision=bf16 or", "expected KEY OP VALUE"),
        ("precision in bf16", "expected '(' after 'in'"),
        ("tags=x", "is a map: name one entry, e.g. tag.sweep=lr"),
        ("workload.arguments=x", "param.lr=3e-3"),
        ("stack=x", "section of the receipt"),
    ],
)
def test_bad_expressions(expr: str, says: str) -> None:
    with pytest.raises(InvalidFilter) as info:
        parse(expr)
    message = str(info.value)
    assert says in message and "\n" not in message and "--where" in message


def test_map_entries_are_checked_against_the_receipts() -> None:
    other = {**R, "workload": {**R["workload"], "arguments": {"lr": "1e-3", "batch": "32"}}}
    with pytest.raises(InvalidFilter, match=r"no receipt has workload.arguments entry 'lrr'; they have: "
                                            r"param.batch, param.lr, param.opt"):
        parse("param.lrr=1").check_against([R, other])
    with pytest.raises(InvalidFilter, match=r"param.lr in --where is a number in every receipt .* 'abc' is not one"):
        parse("param.lr<abc").check_against([R, other])
    parse("param.opt<abc").check_against([R, other])  # a word among words: ordered as text
    parse("param.lrr=1").check_against([])  # an empty ledger has nothing to check against


# ------------------------------------------------------------------------------------- the property test
# The grammar's tree, built by Hypothesis, written out as text in many equivalent spellings, parsed by
# ledger.store.filters, and evaluated both by the parser's predicate and by `evaluate` below.

KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    # key as written -> (path in the receipt dict, kind)
    "loss": (("summary", "final_loss"), "number"),
    "summary.steps": (("summary", "steps"), "number"),
    "seed": (("workload", "seed"), "number"),
    "summary.final_eval.val/loss": (("summary", "final_eval", "val/loss"), "number"),
    "name": (("name",), "text"),
    "precision": (("workload", "precision", "compute"), "text"),
    "status": (("status",), "enum"),
    "stack.code.dirty": (("stack", "code", "dirty"), "bool"),
    "tag.sweep": (("tags", "sweep"), "map"),
    "param.lr": (("workload", "arguments", "lr"), "map"),
}
NUMBERS = ["0", "1", "2.5", "3", "-1", "1e-3", "0.001", "10"]
WORDS = ["bf16", "fp8", "a b", "x", "and", "null", "Q'uote", 'dq"x', "", "3e-3", "b*", "[ab]*"]
STATUSES = ["succeeded", "failed", "interrupted", "imported"]


@dataclass(frozen=True)
class C:
    key: str
    op: str  # = != < <= > >= ~ !~ in not-in
    values: tuple[str | None, ...]  # None: null


@dataclass(frozen=True)
class Not:
    inner: Any


@dataclass(frozen=True)
class And:
    parts: tuple[Any, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Any, ...]


def _values_for(kind: str) -> st.SearchStrategy[str]:
    return {"number": st.sampled_from(NUMBERS), "bool": st.sampled_from(["true", "false"]),
            "enum": st.sampled_from(STATUSES), "text": st.sampled_from(WORDS + NUMBERS),
            "map": st.sampled_from(WORDS + NUMBERS)}[kind]


@st.composite
def conditions(draw: st.DrawFn) -> C:
    key = draw(st.sampled_from(sorted(KEYS)))
    kind = KEYS[key][1]
    ops = {"number": ["=", "!=", "<", "<=", ">", ">=", "in", "not in"], "bool": ["=", "!=", "in", "not in"],
           "enum": ["=", "!=", "~", "!~", "in", "not in"],
           "text": ["=", "!=", "<", "<=", ">", ">=", "~", "!~", "in", "not in"],
           "map": ["=", "!=", "<", "<=", ">", ">=", "~", "!~", "in", "not in"]}[kind]
    op = draw(st.sampled_from(ops))
    if op in ("in", "not in"):
        values = tuple(draw(st.lists(_values_for(kind) | st.none(), min_size=1, max_size=3)))
    elif op in ("=", "!=") and draw(st.booleans()) and draw(st.booleans()):
        values = (None,)
    elif op in ("~", "!~"):
        values = (draw(st.sampled_from(["*", "b*", "*1*", "?", "[ab]*", "fail*", "x"])),)
    else:
        values = (draw(_values_for(kind)),)
    return C(key, op, values)


trees = st.recursive(
    conditions(),
    lambda inner: st.builds(Not, inner) | st.builds(And, st.lists(inner, min_size=2, max_size=3).map(tuple))
    | st.builds(Or, st.lists(inner, min_size=2, max_size=3).map(tuple)),
    max_leaves=6)


@st.composite
def receipts(draw: st.DrawFn) -> dict[str, Any]:
    """A receipt-shaped dict: each key of KEYS present with a value of its kind, or null, or absent."""
    out: dict[str, Any] = {}
    for path, kind in KEYS.values():
        choice = draw(st.integers(0, 4))
        if choice == 0:
            continue  # absent
        value: Any = None
        if choice > 1:
            value = {"number": st.sampled_from([0, 1, 2.5, 3, -1, 0.001, 10, 7]),
                     "bool": st.booleans(), "enum": st.sampled_from(STATUSES),
                     "text": st.sampled_from(["bf16", "fp8", "a b", "x", "b", "1", "3e-3", "and"]),
                     "map": st.sampled_from(["1e-3", "0.001", "3", "bf16", "x", "b", "10", "a b"])}[kind]
            value = draw(value)
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _num(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return None if math.isnan(v) else v


def _as_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _glob(text: str, pattern: str) -> bool:
    """fnmatch's globs, re-implemented: * any run, ? one character, [..] a class."""
    regex = ""
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            regex += ".*"
        elif ch == "?":
            regex += "."
        elif ch == "[" and "]" in pattern[i + 1:]:
            j = pattern.index("]", i + 1)
            regex += "[" + re.escape(pattern[i + 1:j]) + "]"
            i = j
        else:
            regex += re.escape(ch)
        i += 1
    return re.fullmatch(regex, text, re.S) is not None


def _equals(kind: str, actual: Any, literal: str) -> bool:
    if kind == "number":
        return not isinstance(actual, bool) and float(actual) == float(literal)
    if kind == "bool":
        return actual is (literal == "true")
    if kind == "map" and _num(_as_text(actual)) is not None and _num(literal) is not None:
        return _num(_as_text(actual)) == _num(literal)
    return _as_text(actual) == literal


def _ordered(kind: str, op: str, actual: Any, literal: str) -> bool:
    table = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
    if kind == "number":
        return table[op](float(actual), float(literal))
    if kind == "map" and _num(literal) is not None:
        a = _num(_as_text(actual))
        return a is not None and table[op](a, _num(literal))
    return table[op](_as_text(actual), literal)


def evaluate(node: Any, r: dict[str, Any]) -> bool:
    """The documented meaning of a tree, from scratch."""
    if isinstance(node, Not):
        return not evaluate(node.inner, r)
    if isinstance(node, And):
        return all(evaluate(p, r) for p in node.parts)
    if isinstance(node, Or):
        return any(evaluate(p, r) for p in node.parts)
    path, kind = KEYS[node.key]
    actual: Any = r
    for part in path:
        actual = actual.get(part) if isinstance(actual, dict) else None
    negated = {"!=": "=", "!~": "~", "not in": "in"}
    if node.op in negated:
        return not evaluate(C(node.key, negated[node.op], node.values), r)
    if actual is None:
        return node.op in ("=", "in") and None in node.values
    if node.op in ("=", "in"):
        return any(v is not None and _equals(kind, actual, v) for v in node.values)
    if node.op == "~":
        return _glob(_as_text(actual), node.values[0] or "")
    return _ordered(kind, node.op, actual, node.values[0] or "")


BARE = re.compile(r"[^\s()=!<>~,'\"]+")


def _value_text(value: str | None, quote: bool) -> str:
    if value is None:
        return "null"
    if quote or not BARE.fullmatch(value) or value.lower() in ("and", "or", "not", "in", "null", "none"):
        q = "'" if quote and "'" not in value else '"'
        return q + value.replace("\\", "\\\\").replace(q, "\\" + q) + q
    return value


def write(node: Any, draw: st.DrawFn) -> str:
    """The tree as --where text, in one of its spellings (spaces, case, ==, ',' for and, extra parentheses)."""
    space = draw(st.sampled_from(["", " ", "  "]))
    word = draw(st.sampled_from([str.lower, str.upper, str.title]))
    if isinstance(node, Not):
        return f"{word('not')} ({write(node.inner, draw)})"
    if isinstance(node, And | Or):
        sep = f" {word('or')} " if isinstance(node, Or) else draw(st.sampled_from([f" {word('and')} ", ", "]))
        return "(" + sep.join(write(p, draw) for p in node.parts) + ")"
    quote = draw(st.booleans())
    if node.op in ("in", "not in"):
        inner = f",{space}".join(_value_text(v, quote) for v in node.values)
        op = word("not") + " " + word("in") if node.op == "not in" else word("in")
        text = f"{node.key} {op}{space}({space}{inner}{space})"
    else:
        op = "==" if node.op == "=" and draw(st.booleans()) else node.op
        text = f"{node.key}{space}{op}{space}{_value_text(node.values[0], quote)}"
    return f"({text})" if draw(st.integers(0, 5)) == 0 else text


@settings(max_examples=400, deadline=None)
@given(data=st.data(), tree=trees, rs=st.lists(receipts(), min_size=1, max_size=4))
def test_parser_agrees_with_a_plain_evaluator(data: st.DataObject, tree: Any, rs: list[dict[str, Any]]) -> None:
    text = write(tree, data.draw)
    predicate = parse(text)
    for r in rs:
        assert predicate(r) is evaluate(tree, r), text


@settings(max_examples=200, deadline=None)
@given(tree=trees, r=receipts())
def test_not_is_the_negation_and_or_is_the_union(tree: Any, r: dict[str, Any]) -> None:
    base = _plain(tree)
    assert parse(f"not ({base})")(r) is (not parse(base)(r))
    assert parse(f"({base}) or status=failed")(r) is (parse(base)(r) or r.get("status") == "failed")


def _plain(node: Any) -> str:
    """One canonical spelling (no drawing)."""
    if isinstance(node, Not):
        return f"not ({_plain(node.inner)})"
    if isinstance(node, And | Or):
        return "(" + (" or " if isinstance(node, Or) else " and ").join(_plain(p) for p in node.parts) + ")"
    if node.op in ("in", "not in"):
        return f"{node.key} {node.op} (" + ", ".join(_value_text(v, False) for v in node.values) + ")"
    return f"{node.key}{node.op}{_value_text(node.values[0], False)}"


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("()=!<>~,'\" andorintl.x1*")), max_size=30))
def test_anything_else_is_a_one_line_error_or_a_predicate(text: str) -> None:
    try:
        predicate = parse(text)
    except InvalidFilter as exc:
        assert "\n" not in str(exc) and "--where" in str(exc)
        return
    assert predicate(R) in (True, False)


def test_the_language_is_in_ls_help() -> None:
    from click.testing import CliRunner

    from ledger.cli.app import cli

    out = CliRunner().invoke(cli, ["ls", "--help"]).output
    section = out.split("The --where language:", 1)[1]
    for text in ("KEY in (V, ...)", "A and B, A or B, not A", "~ glob", "param.K", "null for a missing value"):
        assert text in section

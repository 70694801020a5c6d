"""`--where` expressions: a small, strict filter language over receipt fields, parsed by recursive descent.

    EXPR   := TERM ("or" TERM)*
    TERM   := FACTOR (("and" | ",") FACTOR)*
    FACTOR := "not" FACTOR | "(" EXPR ")" | COND
    COND   := KEY OP VALUE | KEY ["not"] "in" "(" VALUE ("," VALUE)* ")"
    OP     := = (or ==)  !=  <  <=  >  >=  ~ (glob: * ? [..])  !~ (no glob match)
    KEY    := a dotted receipt path (summary.final_loss, workload.router.capacity_factor, stack.hardware.gpu_model),
              a map entry (tag.K, param.K = workload.arguments.K, summary.final_eval.K, stack.environment.K), a
              shortcut (:data:`SHORTCUTS`: precision, experts, loss, tok/s, steps, time, started, ...), or a key
              beside the receipt (:data:`BESIDE`: archived, notes)
    VALUE  := a bare word or a quoted string ('...' or "..."); null for a missing value

``and`` binds tighter than ``or``; keywords are case-insensitive. Example: ``--where "(precision=bf16 or
precision=fp8) and loss<3.5 and param.lr in (1e-3, 3e-3)"``.

Strict: every key is checked against the receipt schema, every value against its field's type (a number field
takes numbers, a true/false field true or false, ``status`` one of its values), and an operator the language does
not have is refused, each with a one-line :class:`~ledger.errors.InvalidFilter` that names the valid choices.
Map entries (tags, arguments) hold text: they compare as numbers when both sides are numbers (``param.lr=0.001``
matches ``1e-3``), else as text; an ordering with a number never matches a word there.
A missing value is null: it matches ``=null``, ``!=`` anything else and ``not in``; never ``<``, ``>``, ``~`` or
``in`` (so ``not (K=V)`` is ``K!=V`` for every receipt). Times compare as ISO text (``started>2026-12-01``).
Expressions are parsed, never executed: nothing in them reaches SQL or the file system.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Literal, Union

from ledger.errors import InvalidFilter

SHORTCUTS: dict[str, str] = {
    "precision": "workload.precision.compute",
    "experts": "workload.model.num_experts",
    "top_k": "workload.model.top_k",
    "seed": "workload.seed",
    "gpu": "stack.hardware.gpu_model",
    "commit": "stack.code.commit",
    "device": "workload.device",
    "loss": "summary.final_loss",
    "steps": "summary.steps",
    "tokens": "summary.tokens",
    "tok/s": "summary.tokens_per_s",
    "time": "duration_s",
    "started": "started_at",
}
"""Short keys (the `ledger ls` columns among them) -> receipt paths."""
MAP_PREFIXES: dict[str, str] = {"tag.": "tags.", "param.": "workload.arguments.", "params.": "workload.arguments.",
                                "arg.": "workload.arguments."}
"""Short prefixes of map entries: ``tag.sweep``, ``param.lr`` (the launch's arguments and config keys)."""
ARCHIVED = "archived"
NOTES = "notes"
BESIDE: dict[str, Any] = {ARCHIVED: False, NOTES: 0}
"""Keys beside the receipt's own (:mod:`ledger.store.annotation`), with their value when a dict does not say:
whether the run is archived (``ledger archive``), and how many notes it has (``ledger note``)."""
OPERATORS = ("=", "==", "!=", "<", "<=", ">", ">=", "~", "!~", "in", "not in")
NULL_WORDS = ("null", "none")
EXAMPLE = "--where \"precision=bf16 and (loss<3 or param.lr in (1e-3, 3e-3))\""

Kind = Literal["number", "text", "bool", "enum", "time", "list", "object", "map"]


@dataclass(frozen=True)
class Field:
    """What a key holds: its kind, the choices of an enum, and the kind of a map's values."""

    kind: Kind
    choices: tuple[str, ...] = ()
    values: Kind | None = None
    """For a map: the kind of its values (number for summary.final_eval; None: untyped text such as tags)."""


# ------------------------------------------------------------------------------------------------- the schema
def _kind_of(annotation: Any) -> Field:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _kind_of(args[0]) if len(args) == 1 else Field("text")
    if origin is Literal:
        return Field("enum", tuple(str(a) for a in typing.get_args(annotation)))
    if origin is dict:
        value = typing.get_args(annotation)[1]
        inner = _kind_of(value).kind
        return Field("map", values="number" if inner == "number" else None)
    if origin in (tuple, list):
        return Field("list")
    if annotation is bool:
        return Field("bool")
    if annotation in (int, float):
        return Field("number")
    if annotation is str:
        return Field("text")
    if annotation is datetime:
        return Field("time")
    return Field("object")


@cache
def fields() -> dict[str, Field]:
    """Every leaf path of a receipt (``schemas.leaves``) with what it holds, and the ``archived`` key."""
    from pydantic import BaseModel

    from schemas import Receipt, leaves

    def walk(model: type[BaseModel], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, info in model.model_fields.items():
            out[prefix + name] = info.annotation
            if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
                out.update(walk(info.annotation, prefix + name + "."))
        return out

    annotations = walk(Receipt, "")
    out = {path: _kind_of(annotations[path]) for path, _ in leaves()}
    out[ARCHIVED] = Field("bool")
    out[NOTES] = Field("number")
    return out


def maps() -> list[str]:
    """The paths of map fields (tags, workload.arguments, summary.final_eval, stack.environment, ...)."""
    return [p for p, f in fields().items() if f.kind == "map"]


@dataclass(frozen=True)
class Key:
    """A resolved key: the receipt path, and for a map entry the map's path and the entry."""

    text: str
    """As written."""
    path: tuple[str, ...]
    field: Field
    map_path: str | None = None
    entry: str | None = None


def resolve_key(text: str) -> Key:
    """The receipt path a key names, with what it holds; an unknown key is an :class:`InvalidFilter`."""
    key = SHORTCUTS.get(text, text)
    for short, long in MAP_PREFIXES.items():
        if key.startswith(short):
            key = long + key[len(short):]
            break
    known = fields()
    if key in known and known[key].kind != "map":
        return Key(text, tuple(key.split(".")), known[key])
    for prefix in sorted(maps(), key=len, reverse=True):
        if key.startswith(prefix + ".") and len(key) > len(prefix) + 1:
            entry = key[len(prefix) + 1:]
            kind: Kind = known[prefix].values or "text"
            return Key(text, (*prefix.split("."), entry), Field(kind if kind == "number" else "map"), prefix, entry)
    if key in known:  # a whole map
        raise InvalidFilter(f"{text!r} in --where is a map: name one entry, e.g. {_map_example(key)}")
    inside = sorted(p for p in known if p.startswith(key + "."))
    if inside:
        raise InvalidFilter(f"{text!r} in --where is a section of the receipt: name one of its fields, e.g. "
                            f"{', '.join(inside[:3])}")
    import difflib

    close = difflib.get_close_matches(text, [*SHORTCUTS, *known], n=2, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise InvalidFilter(
        f"unknown field {text!r} in --where; {hint}use a receipt path (summary.final_loss, "
        "workload.router.capacity_factor, ...), tag.K, param.K (the launch's arguments), summary.final_eval.K, "
        f"or a shortcut: {', '.join(sorted([*SHORTCUTS, *BESIDE]))}")


def _map_example(path: str) -> str:
    return {"tags": "tag.sweep=lr", "workload.arguments": "param.lr=3e-3"}.get(path, f"{path}.NAME=VALUE")


# ------------------------------------------------------------------------------------------------- tokens
_TOKEN = re.compile(r"""\s*(?:(?P<open>\()|(?P<close>\))|(?P<comma>,)|(?P<op>[=!<>~]+)|(?P<quoted>['"])|"""
                    r"""(?P<word>[^\s()=!<>~,'"]+))""")


@dataclass(frozen=True)
class Token:
    kind: Literal["open", "close", "comma", "op", "word", "quoted", "end"]
    text: str
    at: int


def tokenize(expr: str) -> list[Token]:
    """The tokens of an expression (quoted strings unquoted, with backslash escapes)."""
    out: list[Token] = []
    i = 0
    while True:
        while i < len(expr) and expr[i].isspace():
            i += 1
        if i >= len(expr):
            out.append(Token("end", "", i))
            return out
        m = _TOKEN.match(expr, i)
        assert m is not None and m.lastgroup is not None  # every character starts one of the alternatives
        kind = m.lastgroup
        if kind == "quoted":
            quote, j, chars = m.group("quoted"), m.end(), []
            while j < len(expr) and expr[j] != quote:
                if expr[j] == "\\" and j + 1 < len(expr):
                    j += 1
                chars.append(expr[j])
                j += 1
            if j >= len(expr):
                raise InvalidFilter(f"unclosed quote {quote} at character {m.start('quoted') + 1} in --where; "
                                    "close it")
            out.append(Token("quoted", "".join(chars), m.start("quoted")))
            i = j + 1
            continue
        text = m.group(kind)
        if kind == "op" and text not in OPERATORS:
            raise InvalidFilter(f"unknown operator {text!r} in --where; use one of: = != < <= > >= ~ (glob) "
                                "!~ in (...) not in (...)")
        out.append(Token(kind, text, m.start(kind)))  # type: ignore[arg-type]
        i = m.end()


# ------------------------------------------------------------------------------------------------- the tree
@dataclass(frozen=True)
class Cond:
    """One comparison of a key with a value (or a list of values, for ``in``)."""

    key: Key
    op: str
    """=, !=, <, <=, >, >=, ~, !~, in, not in (== is read as =)."""
    values: tuple[str | None, ...]
    """The value(s); None for null."""

    def __call__(self, receipt: Mapping[str, Any]) -> bool:
        actual = _lookup(receipt, self.key.path)
        if self.op in ("!=", "!~", "not in"):
            return not _positive(self.key.field, {"!=": "=", "!~": "~", "not in": "in"}[self.op], actual,
                                 self.values)
        return _positive(self.key.field, self.op, actual, self.values)


@dataclass(frozen=True)
class Not:
    inner: Node

    def __call__(self, receipt: Mapping[str, Any]) -> bool:
        return not self.inner(receipt)


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Node, ...]

    def __call__(self, receipt: Mapping[str, Any]) -> bool:
        return all(p(receipt) for p in self.parts)


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Node, ...]

    def __call__(self, receipt: Mapping[str, Any]) -> bool:
        return any(p(receipt) for p in self.parts)


Node = Cond | Not | AllOf | AnyOf


def _lookup(receipt: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    if len(path) == 1 and path[0] in BESIDE:
        return receipt.get(path[0], BESIDE[path[0]])
    actual: Any = receipt
    for part in path:
        if not isinstance(actual, Mapping) or part not in actual:
            return None
        actual = actual[part]
    return actual


def number(text: str) -> float | None:
    """A finite or infinite number written as text (``3e-3``, ``8``, ``inf``), else None."""
    try:
        value = float(text.strip())
    except (ValueError, AttributeError):
        return None
    return None if math.isnan(value) else value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return " ".join(_text(v) for v in value)
    return str(value)


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _equal(field: Field, actual: Any, value: str) -> bool:
    if field.kind == "number":
        return isinstance(actual, int | float) and not isinstance(actual, bool) and float(actual) == number(value)
    if field.kind == "bool":
        return isinstance(actual, bool) and actual == (value.lower() == "true")
    if field.kind == "map":  # untyped text: numbers when both sides are numbers
        a, b = number(_text(actual)), number(value)
        if a is not None and b is not None:
            return a == b
    return _text(actual) == value


def _positive(field: Field, op: str, actual: Any, values: tuple[str | None, ...]) -> bool:
    """The comparison's truth for ``=``, ``<``..., ``~`` and ``in`` (the negated operators are its negation)."""
    if actual is None:
        return any(v is None for v in values) if op in ("=", "in") else False
    if op in ("=", "in"):
        return any(v is not None and _equal(field, actual, v) for v in values)
    value = values[0]
    assert value is not None  # null takes = and != only (the parser says so)
    if op == "~":
        import fnmatch

        return fnmatch.fnmatchcase(_text(actual), value)
    if field.kind == "number":
        if isinstance(actual, bool) or not isinstance(actual, int | float):
            return False
        b = number(value)
        return b is not None and _ORDER[op](float(actual), b)
    if field.kind == "map":
        b = number(value)
        if b is not None:  # a number: only values that are numbers are ordered against it
            a = number(_text(actual))
            return a is not None and _ORDER[op](a, b)
    return _ORDER[op](_text(actual), value)


# ------------------------------------------------------------------------------------------------- the parser
class _Parser:
    """Recursive descent over the tokens (the grammar in the module's docstring)."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = tokenize(expr)
        self.i = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def keyword(self, word: str) -> bool:
        token = self.peek()
        return token.kind == "word" and token.text.lower() == word

    def fail(self, token: Token, expected: str) -> InvalidFilter:
        found = "the end" if token.kind == "end" else repr(token.text if token.kind != "quoted" else
                                                              f"'{token.text}'")
        return InvalidFilter(f"cannot parse {self.expr.strip()!r} in --where: expected {expected} at character "
                             f"{token.at + 1}, found {found}; e.g. {EXAMPLE}")

    def parse(self) -> Node:
        node = self.expression()
        if self.peek().kind != "end":
            raise self.fail(self.peek(), "'and', 'or' or the end")
        return node

    def expression(self) -> Node:
        parts = [self.term()]
        while self.keyword("or"):
            self.take()
            parts.append(self.term())
        return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))

    def term(self) -> Node:
        parts = [self.factor()]
        while self.keyword("and") or self.peek().kind == "comma":
            self.take()
            parts.append(self.factor())
        return parts[0] if len(parts) == 1 else AllOf(tuple(parts))

    def factor(self) -> Node:
        if self.keyword("not") and self.tokens[self.i + 1].kind in ("word", "open"):
            self.take()
            return Not(self.factor())
        if self.peek().kind == "open":
            self.take()
            node = self.expression()
            if self.peek().kind != "close":
                raise self.fail(self.peek(), "')'")
            self.take()
            return node
        return self.condition()

    def condition(self) -> Cond:
        token = self.take()
        if token.kind != "word" or token.text.lower() in ("and", "or", "in"):
            raise self.fail(token, "KEY OP VALUE (e.g. status=failed)")
        key = resolve_key(token.text)
        if self.keyword("in") or (self.keyword("not") and self.tokens[self.i + 1].kind == "word"
                                  and self.tokens[self.i + 1].text.lower() == "in"):
            op = "not in" if self.take().text.lower() == "not" else "in"
            if op == "not in":
                self.take()
            return self.membership(key, op)
        op_token = self.take()
        if op_token.kind != "op":
            raise self.fail(op_token, f"KEY OP VALUE, an operator after {token.text!r} (= != < <= > >= ~ !~, "
                                      "or in (...))")
        op = "=" if op_token.text == "==" else op_token.text
        value = self.value(f"a value after {op_token.text!r}")
        return Cond(key, op, (_check(key, op, value),))

    def membership(self, key: Key, op: str) -> Cond:
        if self.peek().kind != "open":
            raise self.fail(self.peek(), f"'(' after {op!r}: {key.text} {op} (a, b, ...)")
        self.take()
        values = [_check(key, "=", self.value("a value"))]
        while self.peek().kind == "comma":
            self.take()
            values.append(_check(key, "=", self.value("a value")))
        if self.peek().kind != "close":
            raise self.fail(self.peek(), "',' or ')'")
        self.take()
        return Cond(key, op, tuple(values))

    def value(self, expected: str) -> str | None:
        token = self.take()
        if token.kind == "quoted":
            return token.text
        if token.kind != "word":
            raise self.fail(token, expected)
        return None if token.text.lower() in NULL_WORDS else token.text


def _check(key: Key, op: str, value: str | None) -> str | None:
    """The value, checked against what the key holds and the operator; else a one-line error with the choices."""
    name, field = key.text, key.field
    if value is None:
        if op not in ("=", "!="):
            raise InvalidFilter(f"null in --where takes = or != only ({name}{op}null); e.g. {name}=null")
        return None
    if field.kind == "object":
        raise InvalidFilter(f"{name} in --where is a section of the receipt: compare it with null only "
                            f"({name}=null, {name}!=null), or name one of its fields")
    if op in ("~", "!~"):
        if field.kind in ("number", "bool"):
            raise InvalidFilter(f"{op} in --where matches text; {name} is a {_what(field)}: use = != < <= > >=")
        return value
    if field.kind == "number" and number(value) is None:
        raise InvalidFilter(f"{name} in --where is a number and {value!r} is not one; e.g. {name}{op}2.5")
    if field.kind == "bool":
        if value.lower() not in ("true", "false"):
            raise InvalidFilter(f"{name} in --where is true or false, not {value!r}")
        if op in _ORDER:
            raise InvalidFilter(f"{name} in --where is true or false: use = or !=, not {op}")
        return value.lower()
    if field.kind == "enum":
        if op in _ORDER:
            raise InvalidFilter(f"{name} in --where has no order: use =, != or in (...) with one of: "
                                f"{', '.join(field.choices)}")
        if value not in field.choices:
            raise InvalidFilter(f"{name} in --where is one of: {', '.join(field.choices)} (not {value!r})")
    if field.kind == "list" and op in _ORDER:
        raise InvalidFilter(f"{name} in --where is a list: use =, != or ~ (a glob over its items), not {op}")
    return value


def _what(field: Field) -> str:
    return {"number": "number", "bool": "true/false field"}.get(field.kind, field.kind)


@dataclass(frozen=True)
class Filter:
    """A parsed ``--where`` expression: call it on a receipt dict (``Receipt.model_dump(mode="json")``, plus
    ``archived`` where the caller knows it)."""

    text: str
    root: Node

    def __call__(self, receipt: Mapping[str, Any]) -> bool:
        return self.root(receipt)

    def conditions(self) -> list[Cond]:
        """Every comparison in the expression."""
        out: list[Cond] = []

        def walk(node: Node) -> None:
            if isinstance(node, Cond):
                out.append(node)
            elif isinstance(node, Not):
                walk(node.inner)
            else:
                for part in node.parts:
                    walk(part)

        walk(self.root)
        return out

    def check_against(self, receipts: Iterable[Mapping[str, Any]]) -> None:
        """What the schema cannot say about map entries, checked against the receipts filtered: an entry no
        receipt has (``param.lrr``: a typo, whose answer would be silently empty) is refused with the entries
        they do have, and so is a word ordered against an entry that is a number in every receipt holding it
        (``param.lr<abc``). Nothing is checked in an empty ledger."""
        conds = [c for c in self.conditions() if c.key.map_path is not None]
        if not conds:
            return
        have: dict[str, dict[str, list[Any]]] = {c.key.map_path: {} for c in conds if c.key.map_path}
        seen = False
        for receipt in receipts:
            seen = True
            for path, entries in have.items():
                found = _lookup(receipt, tuple(path.split(".")))
                if isinstance(found, Mapping):
                    for k, v in found.items():
                        entries.setdefault(k, []).append(v)
        if not seen:
            return
        for c in conds:
            key = c.key
            assert key.map_path is not None and key.entry is not None
            entries = have[key.map_path]
            if key.entry not in entries:
                short = {"tags": "tag.", "workload.arguments": "param."}.get(key.map_path, key.map_path + ".")
                names = sorted(entries)
                shown = ", ".join(short + e for e in names[:20]) + (" ..." if len(names) > 20 else "")
                raise InvalidFilter(f"unknown field {key.text!r} in --where: no receipt has {key.map_path} entry "
                                    f"{key.entry!r}; they have: {shown or 'none'}")
            word = c.values[0] if c.op in _ORDER else None
            if word is not None and number(word) is None and all(number(_text(v)) is not None
                                                                 for v in entries[key.entry]):
                raise InvalidFilter(f"{key.text} in --where is a number in every receipt that has it and {word!r} "
                                    f"is not one; e.g. {key.text}{c.op}{_text(entries[key.entry][0])}")


def parse(expr: str) -> Filter:
    """A predicate over receipt dicts (``Receipt.model_dump(mode="json")``); an expression that does not parse,
    an unknown key or operator, or a value of the wrong kind is an :class:`InvalidFilter`."""
    if not expr.strip():
        raise InvalidFilter(f"empty --where expression; e.g. {EXAMPLE}")
    return Filter(expr, _Parser(expr).parse())


HELP = """\
A --where EXPR keeps the receipts it is true of:
  KEY OP VALUE     OP: = (or ==)  !=  <  <=  >  >=  ~ glob (* ? [..])  !~ no glob match
  KEY in (V, ...)  KEY not in (V, ...)
  A and B, A or B, not A, ( ... )   ('and' binds first; ',' is 'and')
KEY: a receipt path (summary.final_loss, workload.router.capacity_factor, stack.hardware.gpu_model), tag.K,
param.K (the launch's arguments and config keys, workload.arguments.K), summary.final_eval.K, or a shortcut:
precision, experts, top_k, seed, gpu, commit, device, loss, steps, tokens, tok/s, time, started, archived,
notes (how many).
VALUE: a word or a quoted string; null for a missing value. Numbers compare as numbers (a number field refuses
a word); times as ISO text (started>2026-12-01).
"""
"""The language in a few lines, for `ledger ls --help` and the web view (the README has the same)."""

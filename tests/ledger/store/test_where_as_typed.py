"""`--where` as people type it (ledger.store.filters): the kind of every sort of field the schema declares (worked
out here from schemas/receipt.py's annotations), each mistake a user makes with the whole one-line message it
gets (character positions counted by hand), and the spellings that must mean the same (case of keywords and
true/false, spaces, quotes with escapes, numbers written in every form). The property tests of test_filters.py
check the language's meaning; this file checks what a user reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import InvalidFilter
from ledger.store import filters
from ledger.store.filters import Field, _kind_of, fields, parse

EXAMPLE = '; e.g. --where "precision=bf16 and (loss<3 or param.lr in (1e-3, 3e-3))"'
RECEIPT: dict[str, Any] = {
    "name": "fp8-grouped", "status": "failed", "started_at": "2026-12-01T10:30:00Z",
    "command": ["torchrun", "train.py", "--lr", "3e-3"], "tags": {"sweep": "lr", "it's": "x"},
    "stack": {"code": {"dirty": True, "commit": "abc123"}},
    "workload": {"seed": 3, "precision": {"compute": "fp8"}, "model": {"num_experts": 8},
                 "arguments": {"lr": "3e-3", "opt": "adamw", "batch": "32"}},
    "summary": {"final_loss": 2.5, "steps": 100, "final_eval": {"val/loss": 2.75}},
}


@pytest.fixture(autouse=True)
def fresh_fields() -> Iterator[None]:
    """`fields()` is cached: computed again for each test (and left fresh after)."""
    fields.cache_clear()
    yield
    fields.cache_clear()


def test_every_sort_of_field_holds_what_the_schema_declares() -> None:
    """One field of each annotation in schemas/receipt.py, its kind written by hand from that annotation."""
    known = fields()
    expected = {
        "status": Field("enum", ("succeeded", "failed", "interrupted", "imported")),  # Literal[...]
        "stack.software.source": Field("enum", ("wrapper", "process")),  # Literal[...] | None
        "started_at": Field("time"),  # datetime | None
        "command": Field("list"),  # tuple[str, ...]
        "source": Field("object"),  # ImportSource | None (a model)
        "capture": Field("object"),
        "stack.code.dirty": Field("bool"),  # bool | None
        "summary.final_loss": Field("number"),  # float | None
        "workload.seed": Field("number"),  # int | None
        "name": Field("text"),  # str | None
        "stack.code.commit": Field("text"),
        "summary.final_eval": Field("map", values="number"),  # dict[str, float]
        "tags": Field("map"),  # dict[str, str]: untyped text
        "workload.arguments": Field("map"),
        "workload.data.generator": Field("map"),  # dict[str, Any]
        "archived": Field("bool"),  # beside the receipt
        "notes": Field("number"),
    }
    assert {k: known[k] for k in expected} == expected
    assert sorted(filters.maps()) == sorted(["tags", "stack.container.ngc", "stack.software.nvidia",
                                             "stack.environment", "workload.data.generator", "workload.arguments",
                                             "summary.final_eval"])


def test_an_annotation_of_two_kinds_is_text_and_one_of_a_model_an_object() -> None:
    assert _kind_of(int | str) == Field("text")
    assert _kind_of(float | None) == Field("number")
    assert _kind_of(Literal["a", "b"] | None) == Field("enum", ("a", "b"))
    assert _kind_of(dict[str, int]) == Field("map", values="number")
    assert _kind_of(list[int]) == Field("list")
    assert _kind_of(Field) == Field("object")


@pytest.mark.parametrize(("typed", "message"), [
    ("source=x", "source in --where is a section of the receipt: compare it with null only (source=null, "
                 "source!=null), or name one of its fields"),
    ("stack.code.dirty<true", "stack.code.dirty in --where is true or false: use = or !=, not <"),
    ("stack.code.dirty=yes", "stack.code.dirty in --where is true or false, not 'yes'"),
    ("stack.code.dirty~t*", "~ in --where matches text; stack.code.dirty is a true/false field: use = != < <= > >="),
    ("experts!~8*", "!~ in --where matches text; experts is a number: use = != < <= > >="),
    ("name", "cannot parse 'name' in --where: expected KEY OP VALUE, an operator after 'name' (= != < <= > >= ~ "
             "!~, or in (...)) at character 5, found the end" + EXAMPLE),
    ("name bf16", "cannot parse 'name bf16' in --where: expected KEY OP VALUE, an operator after 'name' (= != < <= > "
                  ">= ~ !~, or in (...)) at character 6, found 'bf16'" + EXAMPLE),
    ("or=1", "cannot parse 'or=1' in --where: expected KEY OP VALUE (e.g. status=failed) at character 1, found "
             "'or'" + EXAMPLE),
    ("loss<3 and", "cannot parse 'loss<3 and' in --where: expected KEY OP VALUE (e.g. status=failed) at character "
                   "11, found the end" + EXAMPLE),
    ("status in (failed", "cannot parse 'status in (failed' in --where: expected ',' or ')' at character 18, found "
                          "the end" + EXAMPLE),
    ("status in failed", "cannot parse 'status in failed' in --where: expected '(' after 'in': status in (a, b, "
                         "...) at character 11, found 'failed'" + EXAMPLE),
    ("status not in failed", "cannot parse 'status not in failed' in --where: expected '(' after 'not in': status "
                             "not in (a, b, ...) at character 15, found 'failed'" + EXAMPLE),
    ("status in (failed,)", "cannot parse 'status in (failed,)' in --where: expected a value at character 19, "
                            "found ')'" + EXAMPLE),
    ("name='x' 'y'", "cannot parse \"name='x' 'y'\" in --where: expected 'and', 'or' or the end at character 10, "
                     "found \"'y'\"" + EXAMPLE),
    ("name=x y", "cannot parse 'name=x y' in --where: expected 'and', 'or' or the end at character 8, found 'y'"
                 + EXAMPLE),
    ("name=", "cannot parse 'name=' in --where: expected a value after '=' at character 6, found the end" + EXAMPLE),
    ("name<=(", "cannot parse 'name<=(' in --where: expected a value after '<=' at character 7, found '('"
                + EXAMPLE),
    ("(loss<3", "cannot parse '(loss<3' in --where: expected ')' at character 8, found the end" + EXAMPLE),
    ("loss<3)", "cannot parse 'loss<3)' in --where: expected 'and', 'or' or the end at character 7, found ')'"
                + EXAMPLE),
    ("  loss<3 ) ", "cannot parse 'loss<3 )' in --where: expected 'and', 'or' or the end at character 10, found "
                    "')'" + EXAMPLE),
    ("name='abc", "unclosed quote ' at character 6 in --where; close it"),
    ('name = "a\\"', 'unclosed quote " at character 8 in --where; close it'),
    ("name='abc\\", "unclosed quote ' at character 6 in --where; close it"),  # a backslash last: nothing to escape
    ("loss=>3", "unknown operator '=>' in --where; use one of: = != < <= > >= ~ (glob) !~ in (...) not in (...)"),
    ("loss=<3", "unknown operator '=<' in --where; use one of: = != < <= > >= ~ (glob) !~ in (...) not in (...)"),
    ("loss===3", "unknown operator '===' in --where; use one of: = != < <= > >= ~ (glob) !~ in (...) not in (...)"),
    ("tags=x", "'tags' in --where is a map: name one entry, e.g. tag.sweep=lr"),
    ("workload.arguments=1", "'workload.arguments' in --where is a map: name one entry, e.g. param.lr=3e-3"),
    ("summary.final_eval=1", "'summary.final_eval' in --where is a map: name one entry, e.g. "
                             "summary.final_eval.NAME=VALUE"),
    ("workload.router=1", "'workload.router' in --where is a section of the receipt: name one of its fields, e.g. "
                          "workload.router.aux_loss_coeff, workload.router.capacity_factor, "
                          "workload.router.drop_policy"),
    ("loss<null", "null in --where takes = or != only (loss<null); e.g. loss=null"),
    ("name~None", "null in --where takes = or != only (name~null); e.g. name=null"),
    ("loss<nan", "loss in --where is a number and 'nan' is not one; e.g. loss<2.5"),
    ("loss<3.5.1", "loss in --where is a number and '3.5.1' is not one; e.g. loss<2.5"),
    ("experts in (8, eight)", "experts in --where is a number and 'eight' is not one; e.g. experts=2.5"),
    ("status<failed", "status in --where has no order: use =, != or in (...) with one of: succeeded, failed, "
                      "interrupted, imported"),
    ("status=Failed", "status in --where is one of: succeeded, failed, interrupted, imported (not 'Failed')"),
    ("command<x", "command in --where is a list: use =, != or ~ (a glob over its items), not <"),
    ("  ", "empty --where expression" + EXAMPLE),
])
def test_each_mistake_gets_one_line_that_says_what_to_type(typed: str, message: str) -> None:
    with pytest.raises(InvalidFilter) as caught:
        parse(typed)
    assert str(caught.value) == message


def test_an_unknown_key_names_the_keys_close_to_it_and_the_shortcuts() -> None:
    shortcuts = "archived, commit, device, experts, gpu, loss, notes, precision, seed, started, steps, time, tok/s, " \
                "tokens, top_k"
    tail = ("use a receipt path (summary.final_loss, workload.router.capacity_factor, ...), tag.K, param.K (the "
            f"launch's arguments), summary.final_eval.K, or a shortcut: {shortcuts}")
    for typed, hint in [("Precision=bf16", "did you mean precision? "),
                        ("sumary.final_loss<3", "did you mean summary.final_loss or summary.final_eval? "),
                        ("tag.=x", "did you mean tags? "),  # an entry with no name: not a map entry
                        # three keys are as close: the two closest are named
                        ("stack.hardware.gpu=H100", "did you mean stack.hardware.gpus or stack.hardware.gpu_model? "),
                        ("zzz=1", "")]:
        with pytest.raises(InvalidFilter) as caught:
            parse(typed)
        assert str(caught.value) == f"unknown field {typed.split('=')[0].split('<')[0]!r} in --where; {hint}{tail}"


def test_an_entry_no_receipt_has_is_refused_with_those_they_have() -> None:
    with pytest.raises(InvalidFilter) as caught:
        parse("param.lrr=1").check_against([RECEIPT])
    assert str(caught.value) == ("unknown field 'param.lrr' in --where: no receipt has workload.arguments entry "
                                 "'lrr'; they have: param.batch, param.lr, param.opt")
    with pytest.raises(InvalidFilter) as caught:
        parse("tag.swep=lr").check_against([RECEIPT])
    assert str(caught.value) == ("unknown field 'tag.swep' in --where: no receipt has tags entry 'swep'; they have: "
                                 "tag.it's, tag.sweep")
    bare = {**RECEIPT, "tags": {}}
    with pytest.raises(InvalidFilter) as caught:
        parse("tag.sweep=lr").check_against([bare])
    assert str(caught.value) == ("unknown field 'tag.sweep' in --where: no receipt has tags entry 'sweep'; they have: "
                                 "none")
    many = {**RECEIPT, "stack": {"environment": {f"V{i:02}": "1" for i in range(25)}}}
    with pytest.raises(InvalidFilter) as caught:
        parse("stack.environment.X=1").check_against([many])
    shown = ", ".join(f"stack.environment.V{i:02}" for i in range(20))
    assert str(caught.value) == ("unknown field 'stack.environment.X' in --where: no receipt has stack.environment "
                                 f"entry 'X'; they have: {shown} ...")
    twenty = {**RECEIPT, "stack": {"environment": {f"V{i:02}": "1" for i in range(20)}}}
    with pytest.raises(InvalidFilter) as caught:
        parse("stack.environment.X=1").check_against([twenty])
    assert str(caught.value).endswith(f"they have: {shown}")  # all twenty shown: nothing left out
    with pytest.raises(InvalidFilter) as caught:
        parse("param.batch>=big").check_against([RECEIPT])
    assert str(caught.value) == ("param.batch in --where is a number in every receipt that has it and 'big' is not "
                                 "one; e.g. param.batch>=32")
    parse("param.batch>=64").check_against([RECEIPT])  # a number against numbers: fine
    parse("param.opt>=adam").check_against([RECEIPT])  # a word against words: ordered as text
    parse("param.batch=big").check_against([RECEIPT])  # = with a word is no ordering: no answer is hidden


@pytest.mark.parametrize(("typed", "expected"), [
    # keywords in any case, spaces or none, == for =, ',' for and
    ("PRECISION=fp8", None),
    ("precision = fp8 AND experts >= 8", True),
    ("precision==fp8,experts>=8", True),
    ("precision=bf16 Or Not (experts<8)", True),
    ("status NOT IN (succeeded, imported)", True),
    ("status In(failed)", True),
    # true/false in any case
    ("stack.code.dirty=TRUE", True),
    ("stack.code.dirty=True", True),
    ("stack.code.dirty!=False", True),
    ("stack.code.dirty=false", False),
    # numbers in every form
    ("loss=2.5", True), ("loss=2.50", True), ("loss=25e-1", True), ("loss=+2.5", True), ("loss<inf", True),
    ("loss>-Infinity", True), ("loss<.3e1", True), ("steps=1E2", True), ("steps=100.0", True),
    ("param.lr=0.003", True), ("param.lr=3E-3", True), ("param.lr in (1e-3, .003)", True), ("param.lr>0.0025", True),
    ("summary.final_eval.val/loss<3", True), ("summary.final_eval.val/loss=2.75", True),
    # text: quotes with escapes, globs, a word that is a keyword
    ("name='fp8-grouped'", True), ('name="fp8-grouped"', True), ("name=fp8*", False), ("name~fp8*", True),
    ("name~'fp8 *'", False), ("name~*-grouped", True), ("name~FP8*", False), ("name~fp?-*", True),
    ("name~[ef]p8*", True), ("tag.\"it's\"=x", None), ("tag.it's=x", None),
    ("command~*train.py*", True), ("command=torchrun train.py --lr 3e-3", None),
    ("command='torchrun train.py --lr 3e-3'", True),
    # times as ISO text
    ("started>2026-12-01", True), ("started<2026-12-01T10:31", True), ("started>=2026-12-02", False),
    ("started_at~2026-12-01*", True),
    # null for missing values, in both spellings and any case
    ("workload.router.capacity_factor=null", True), ("workload.router.capacity_factor=NONE", True),
    ("loss!=Null", True), ("tag.missing in (null, x)", True), ("tag.missing not in (x)", True),
    ("tag.missing<1", False), ("tag.missing~*", False),
])
def test_the_forms_people_type(typed: str, expected: bool | None) -> None:
    if expected is None:  # refused with a message, or read otherwise than a user might think: say which
        with pytest.raises(InvalidFilter):
            parse(typed)
        return
    assert parse(typed)(RECEIPT) is expected


def test_quoted_values_unescape_backslashes() -> None:
    r = {**RECEIPT, "name": 'it\'s "x"\\'}
    assert parse("name='it\\'s \"x\"\\\\'")(r) is True
    assert parse('name="it\'s \\"x\\"\\\\"')(r) is True
    assert parse("name='it\\'s'")(r) is False
    assert filters.tokenize("a='b\\'c' ,")[2] == filters.Token("quoted", "b'c", 2)
    assert [t.kind for t in filters.tokenize("(a<=b)")] == ["open", "word", "op", "word", "close", "end"]
    assert filters.tokenize("  ")[-1] == filters.Token("end", "", 2)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet=st.sampled_from(list("ab '\"\\=x")), max_size=12))
def test_any_value_written_in_quotes_is_read_back(value: str) -> None:
    """Every text, quoted with escapes as the docs say, is the value compared (a round trip)."""
    quoted = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    r = {**RECEIPT, "name": value}
    assert parse(f"name={quoted}")(r) is True
    assert parse(f"name!={quoted}")(r) is False
    assert parse(f"name in ({quoted}, other)")(r) is True


def test_true_and_false_inside_a_map_or_a_list_compare_as_the_words() -> None:
    """A data generator's settings hold JSON values (``dict[str, Any]``): a bool there reads as true/false."""
    r = {**RECEIPT, "workload": {**RECEIPT["workload"], "data": {"generator": {"shuffle": False, "pack": True}}}}
    assert parse("workload.data.generator.shuffle=false")(r) is True
    assert parse("workload.data.generator.pack=true")(r) is True
    assert parse("workload.data.generator.shuffle~f*")(r) is True
    assert parse("workload.data.generator.pack in (false, 0)")(r) is False
    listed = {**RECEIPT, "command": ["run", True, False, 3]}
    assert parse("command='run true false 3'")(listed) is True


def test_archived_and_notes_are_read_beside_the_receipt() -> None:
    assert parse("archived=false")(RECEIPT) is True
    assert parse("archived=true")({**RECEIPT, "archived": True}) is True
    assert parse("notes=0")(RECEIPT) is True and parse("notes>=2")({**RECEIPT, "notes": 2}) is True
    assert parse("notes>0")(RECEIPT) is False


def test_a_condition_lists_its_key_operator_and_values() -> None:
    f = parse("(precision==fp8 or experts in (8, 16)) and not tag.sweep~l* and loss!=null")
    got = [(c.key.text, c.key.path, c.op, c.values) for c in f.conditions()]
    assert got == [("precision", ("workload", "precision", "compute"), "=", ("fp8",)),
                   ("experts", ("workload", "model", "num_experts"), "in", ("8", "16")),
                   ("tag.sweep", ("tags", "sweep"), "~", ("l*",)),
                   ("loss", ("summary", "final_loss"), "!=", (None,))]
    entry = f.conditions()[2].key
    assert (entry.map_path, entry.entry, entry.field) == ("tags", "sweep", Field("map"))
    ev = parse("summary.final_eval.val/loss<3").conditions()[0].key
    assert (ev.map_path, ev.entry, ev.field) == ("summary.final_eval", "val/loss", Field("number"))
    assert parse("stack.code.dirty=TRUE").conditions()[0].values == ("true",)

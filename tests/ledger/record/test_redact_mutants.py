"""Redaction in this process, branch by branch (mutation testing cannot run the `ledger` CLI that
test_secrets.py drives): the environment allow-list, learned values, argv's flag forms, URLs, JSON documents,
labels and tags, bytes in and out, and the output log's PEM blocks over batches. Each expected text is written
out by hand from the rules in ledger/redact.py's docstring."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pytest

from ledger.redact import (
    MAX_BLOCK_LINES,
    REDACTED,
    SMALL_TEXT,
    Redactor,
    StreamRedactor,
    high_entropy,
    looks_secret,
    redact_json,
    secret_value,
    shannon_entropy,
)

R = REDACTED
RANDOM = "Zq8xW2vR7tY1uI3oP5aS9dF4"  # 24 distinct base64 characters: log2(24) = 4.58 bits > 4.5
FILLER = "".join(f"step {i} | loss 2.5 | tokens/s 5123 | tokenizer gpt2\n" for i in range(200))


def test_the_environment_keeps_the_allow_list_and_the_extra_names() -> None:
    env = {"NCCL_X": "a", "MY_VAR": "1", "TEAM_A": "2", "OTHER": "3", "CUDA_TOKEN": "abc", "CUDA_EMPTY": "",
           "CUDA_TOKEN2": "", "CUDA_URL": "https://u:p@h/x", "RANK": "0", "TEAMB": "4"}
    r = Redactor(env, extra_env=["MY_VAR", "TEAM_*"])
    assert r.environment() == {"CUDA_EMPTY": "", "CUDA_TOKEN": R, "CUDA_TOKEN2": "", "CUDA_URL": R, "MY_VAR": "1",
                               "NCCL_X": "a", "RANK": "0", "TEAM_A": "2"}
    plain = Redactor(env)
    assert sorted(plain.environment()) == ["CUDA_EMPTY", "CUDA_TOKEN", "CUDA_TOKEN2", "CUDA_URL", "NCCL_X", "RANK"]
    assert not plain.allowed("MY_VAR") and not plain.allowed("TEAM_A") and plain.allowed("MEGATRON_X")
    assert Redactor({}, extra_env=["X*"]).allowed("XY") and not Redactor({}, extra_env=["X*"]).allowed("YX")


def test_secret_values_of_the_environment_and_learned_ones_longest_first() -> None:
    r = Redactor({"DB_PASSWORD": "abcdef", "API_KEY": "abcdefgh", "PLAIN": "zzzzzzzz"})
    assert r.text("x abcdefgh y abcdef z zzzzzzzz") == f"x {R} y {R} z zzzzzzzz"  # never <redacted>gh
    r.learn("12345")  # five characters: too short to replace everywhere
    r.learn("qwerty")
    r.learn("qwerty")
    assert r.text("12345 qwerty") == f"12345 {R}"
    long = FILLER + "echo abcdefgh and qwerty\n"
    assert len(long) > SMALL_TEXT and r.text(long) == FILLER + f"echo {R} and {R}\n"
    assert r.text_bytes(long.encode()) == (FILLER + f"echo {R} and {R}\n").encode()


def test_bytes_in_and_out() -> None:
    r = Redactor({})
    assert r.text_bytes("café \xff".encode("latin-1") + b" password=hunter22") == (
        "caf\ufffd \ufffd password=" + R).encode()
    assert r.text_bytes(b"plain ascii") == b"plain ascii"
    long = FILLER.encode() + "naïve password=hunter22 ok\n".encode() + b"\xff\n"
    assert r.text_bytes(long) == FILLER.encode() + f"naïve password={R} ok\n\ufffd\n".encode()
    assert r.text(FILLER + "x" * 10) == FILLER + "x" * 10  # a long text without a hot line comes back whole


def test_the_short_text_edge_is_inclusive() -> None:
    # every rule runs on texts up to SMALL_TEXT characters; the quoted-entropy rule alone does not make a line of
    # a longer text hot, so a text of exactly SMALL_TEXT characters shows which side of the edge it took
    line = f'x = "{RANDOM}"\n'
    text = "a" * (SMALL_TEXT - len(line) - 1) + "\n" + line
    assert len(text) == SMALL_TEXT == 4096
    assert Redactor({}).text(text) == text.replace(RANDOM, R)
    assert Redactor({}).text("a" + text) == "a" + text  # one more character: the long-text path


def test_a_long_text_with_a_lone_surrogate() -> None:
    r = Redactor({})
    text = FILLER + "\ud800 -----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\npassword=hunter22\n"
    assert r.text(text) == FILLER + f"\ud800 {R}\npassword={R}\n"


def test_a_long_text_redacts_pem_blocks_and_hot_lines_only() -> None:
    r = Redactor({})
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQ\n-----END PRIVATE KEY-----"
    text = FILLER + key + "\nafter https://bob:pw1@host/x and ghp_" + "a1" * 18 + "\n" + FILLER
    assert r.text(text) == FILLER + f"{R}\nafter https://{R}@host/x and {R}\n" + FILLER


@pytest.mark.parametrize(("text", "expected"), [
    ("x aws pwd '" + "a" * 39 + "1' y", f"x aws pwd '{R}' y"),  # detect-secrets' AWS rule: only its group is redacted
    ("Authorization: Bearer abcdefgh123", f"Authorization: Bearer {R}"),
    ("got bearer abcdefgh123 back", f"got bearer {R} back"),
    ("AUTH=abc123", f"AUTH={R}"),
    ("wandb login 0123456789abcdef0123456789abcdef01234567", f"wandb login {R}"),
    ("commit 0123456789abcdef0123456789abcdef01234567", "commit 0123456789abcdef0123456789abcdef01234567"),
    ("mysql -uroot -psecret1 db", f"mysql -uroot -p{R} db"),
    ("curl --user bob:pa55 https://x", f"curl --user bob:{R} https://x"),
    ('"token": "abc123"', f'"token": "{R}"'),
    ("--api-key 8 --api-key 8a7f", f"--api-key 8 --api-key {R}"),
    (f'x = "{RANDOM}"', f'x = "{R}"'),
    ('x = "abcdefghijklmnopqrstuvwxyz"', 'x = "abcdefghijklmnopqrstuvwxyz"'),  # no digit: not by entropy
    ("MAX_TOKENS=4096 tokenizer=gpt2", "MAX_TOKENS=4096 tokenizer=gpt2"),
])
def test_text_rules(text: str, expected: str) -> None:
    r = Redactor({})
    assert r.text(text) == expected
    if not text.startswith("x = "):  # (quotes alone do not make a line of a long text hot: by design)
        assert r.text(FILLER + text + "\n") == FILLER + expected + "\n"  # the same on a hot line of a long text


def test_argv_forms() -> None:
    r = Redactor({})
    assert r.argv(["mysql", "-uroot", "-psecret1", "-p", "db"]) == ["mysql", "-uroot", f"-p{R}", "-p", "db"]
    assert r.argv(["/usr/bin/mysqldump", "-pX"]) == ["/usr/bin/mysqldump", f"-p{R}"]
    assert r.argv(["curl", "-u", "admin:pa:ss99"]) == ["curl", "-u", f"admin:{R}"]  # the password may hold ':'
    assert r.text("pa:ss99") == R
    assert r.argv(["ls", "-pfoo123"]) == ["ls", "-pfoo123"]  # -p is a password for mysql only
    assert r.argv(["curl", "-u", "admin:pa55word", "--user", "bob", "-u", "x:"]) == [
        "curl", "-u", f"admin:{R}", "--user", "bob", "-u", "x:"]
    assert r.argv(["t", "--hf-token", "--bf16"]) == ["t", "--hf-token", "--bf16"]  # a switch: nothing consumed
    assert r.argv(["t", "--api-key", "-5", "--password", "-5"]) == ["t", "--api-key", "-5", "--password", R]
    assert r.argv(["t", "--api-key=abcdef12", "--topk-key=8", f"--name={RANDOM}", RANDOM, "--password"]) == [
        "t", f"--api-key={R}", "--topk-key=8", f"--name={R}", R, "--password"]
    assert r.argv(["t", "--hf-token", "hf_" + "x" * 30]) == ["t", "--hf-token", R]
    assert r.argv([]) == []
    # every value redacted by argv is learned: the output that echoes it is redacted too
    assert r.text("echo secret1 pa55word abcdef12") == f"echo {R} {R} {R}"
    assert r.text(f"{RANDOM} -5") == f"{R} -5"


def test_urls() -> None:
    r = Redactor({})
    assert r.url("https://user:pw@host/x?token=abc123") == f"https://host/x?token={R}"
    assert r.url("git@github.com:org/repo.git") == "git@github.com:org/repo.git"
    assert r.url("ssh://git@host:22/repo") == "ssh://host:22/repo"


def test_json_documents() -> None:
    r = Redactor({"HF_TOKEN": "hf_value_123"})
    doc = {"api_secret": None, "api_key": 8, "password": 8, "x": [{"token": "abc"}, "hf_value_123", 1.5, True],
           1: "a", "hf_value_123": {"k": None}}
    assert r.json(doc) == {"api_secret": None, "api_key": 8, "password": R, "x": [{"token": R}, R, 1.5, True],
                           "1": "a", R: {"k": None}}
    assert redact_json("plain", str.upper) == "PLAIN" and redact_json(3, str.upper) == 3
    assert r.json({"api_key": "8", "top_k_token": "16"}) == {"api_key": "8", "top_k_token": "16"}  # sizes


def test_labels_and_tags() -> None:
    r = Redactor({})
    assert r.label(f" {RANDOM} ") == R
    assert r.label("dsv3-671b-1024xH100-mtp-fp8-blockwise") == "dsv3-671b-1024xH100-mtp-fp8-blockwise"
    assert r.label("run password=hunter22") == f"run password={R}"
    assert r.tags({"api_key": "8", "hf_token": "abc", "run": RANDOM, "note": "password=xyz123", "k": "v"}) == {
        "api_key": "8", "hf_token": R, "run": R, "note": f"password={R}", "k": "v"}


def test_entropy_by_hand() -> None:
    def bits(s: str) -> float:
        n = len(s)
        return -sum(c / n * math.log2(c / n) for c in Counter(s).values())

    assert shannon_entropy("") == 0.0 and shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abab") == 1.0 and shannon_entropy(RANDOM) == pytest.approx(bits(RANDOM))
    assert shannon_entropy("ab!!") == pytest.approx(1.0)  # characters outside base64 add nothing
    assert high_entropy(RANDOM) and bits(RANDOM) > 4.5
    assert not high_entropy("abcdefghijklmnopqrstuvwxyzABCD")  # 4.9 bits, but no digit
    assert not high_entropy(RANDOM[:20] + "a" * 4)  # 4.32 bits or less
    assert not high_entropy(RANDOM[:19])


def test_names_and_values_at_the_edges() -> None:
    assert looks_secret("dbPassword") and looks_secret("PWORD") and looks_secret("my-pw")
    assert looks_secret("DB_PWD") and secret_value("DB_PWD", "1234")
    assert not looks_secret("token_type") and not looks_secret("authors") and not looks_secret("query_key_scaling")
    assert looks_secret("query_key") is False and looks_secret("key_value") is False
    assert looks_secret("key") and looks_secret("value_key") and looks_secret("querykey_x") is False
    assert secret_value("api_key", R) is False and secret_value("token", " 12 ") is False
    assert secret_value("token", "1234567") is True  # seven digits: not a size
    assert secret_value("auth_key", "8") is True  # AUTH is not only KEY or TOKEN


# ------------------------------------------------------------------------------------------ stream
BEGIN, END = "-----BEGIN RSA PRIVATE KEY-----\n", "-----END RSA PRIVATE KEY-----\n"


def test_a_stream_without_keys_is_redacted_as_text() -> None:
    s = StreamRedactor(Redactor({}))
    assert s.feed("a password=abc123\nb\n") == f"a password={R}\nb\n" and not s.open_block
    assert s.feed_bytes(b"a password=abc123\n\xff\n") == f"a password={R}\n\ufffd\n".encode()
    assert s.feed_bytes(BEGIN.encode() + b"QUJD\n\xff visible\n") == f"{R}\n\ufffd visible\n".encode()
    assert s.open_block


def test_a_block_over_batches_ends_at_its_own_end_line() -> None:
    s = StreamRedactor(Redactor({}))
    assert s.feed("0: start\n0: " + BEGIN + "MIIEow\n") == f"0: start\n0: {R}\n"
    assert s.open_block and s.open == {"RSA PRIVATE KEY": 1}
    out = s.feed("QUJD\nstep 5 password=abc123\n-----END PRIVATE KEY-----\nQUJD=\nProc-Type: 4,ENCRYPTED\n\n")
    assert out == f"{R}\nstep 5 password={R}\n-----END PRIVATE KEY-----\n{R}\n" and s.open_block
    assert s.feed_bytes(("QUJD\n" + END.rstrip("\n") + " tail password=x1y2z3\nvisible\n").encode()) == (
        f"{R}\n tail password={R}\nvisible\n").encode()
    assert not s.open_block and s.feed("QUJD\n") == "QUJD\n"


def test_a_block_begun_and_ended_on_one_line_is_text() -> None:
    s = StreamRedactor(Redactor({}))
    line = "key -----BEGIN PRIVATE KEY-----\\nMIIE\\n-----END PRIVATE KEY----- done\n"
    assert s.feed(line) == f"key {R} done\n" and not s.open_block
    other = "x -----BEGIN PRIVATE KEY----- y -----END RSA PRIVATE KEY-----\nQUJD\n"  # another kind's END
    assert s.feed(other) == f"x {R}\n" and s.open == {"PRIVATE KEY": 1}


def test_two_blocks_of_different_kinds_interleaved() -> None:
    s = StreamRedactor(Redactor({}))
    ssh = "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\n"
    out = s.feed(BEGIN + "QUJD\n" + ssh + "QUJD\n" + END + "QUJD\n" + "---- END SSH2 ENCRYPTED PRIVATE KEY ----\n"
                 + "after\n")
    assert out == f"{R}\nafter\n" and not s.open_block


def test_an_unterminated_block_stops_hiding_after_its_limit() -> None:
    s = StreamRedactor(Redactor({}))
    body = "QUJD\n" * MAX_BLOCK_LINES
    assert MAX_BLOCK_LINES == 400
    assert s.feed(BEGIN + body) == f"{R}\n" and s.open == {"RSA PRIVATE KEY": MAX_BLOCK_LINES}
    assert s.feed("QUJE\nQUJF\n") == "QUJE\nQUJF\n" and not s.open_block


# ------------------------------------------------------------------------------------------ the rule tables
def test_the_rules_file_loads_into_text_rules_and_line_rules() -> None:
    import json

    from ledger.redact import RULE_GUARDS, RULES_FILE, _load_rules, _plugin_sub

    data = json.loads(RULES_FILE.read_text())
    whole, line = _load_rules()
    assert len(whole) == sum(g is None for gs in RULE_GUARDS.values() for g in gs) == 17
    assert [(r[0].pattern, r[1], r[2]) for r in whole] == [
        (d["pattern"], _plugin_sub, None) for d in data if d["guards"] is None]
    assert [(r[0].pattern, r[1], r[2]) for r in line] == [
        (d["pattern"], _plugin_sub, tuple(d["guards"])) for d in data if d["guards"] is not None]
    aws = next(r for r in line if r[2] == ("aws",))
    assert aws[0].flags & re.IGNORECASE and aws[0].search("AWS_KEY='" + "A" * 40 + "'")


def test_unguarded_rules_become_one_alternation_without_groups() -> None:
    from ledger.redact import _one_pass

    pattern, replacement, guards = _one_pass(((re.compile(r"(ab)c"), R, None), (re.compile(r"x(?:y)(z)", re.I), R,
                                                                                  None)))
    assert pattern.pattern == "(?:(?:ab)c)|(?i:x(?:y)(?:z))" and pattern.groups == 0
    assert (replacement, guards) == (R, None)
    assert pattern.sub(R, "abc XYZ xyz ab") == f"{R} {R} {R} ab"


def test_literal_starts_of_patterns() -> None:
    from ledger.redact import literal_starts

    assert literal_starts(re.compile(r"(ghp|gho)_x")) == ["gho_x", "ghp_x"]
    assert literal_starts(re.compile(r"[ab]c\d")) == ["ac", "bc"]
    assert literal_starts(re.compile(r"(?:ab\d|cd)e")) == ["ab", "cd"]  # a branch that is not all literal stops
    assert literal_starts(re.compile(r"(?:ab|cd)e")) == ["abe", "cde"]
    assert literal_starts(re.compile(r"a\d")) is None  # one character is too short a start
    assert literal_starts(re.compile(r"\dabc")) is None and literal_starts(re.compile(r".*")) is None
    assert literal_starts(re.compile(r"[abcdefghij][abcdefghij]x")) is None  # 100 starts: too many
    assert literal_starts(re.compile(r"(?i:ab)c")) is None  # a group with flags: not literal
    assert literal_starts(re.compile("ab c", re.VERBOSE)) == ["abc"]  # parsed with the pattern's flags


def test_the_hot_line_scan() -> None:
    from ledger.redact import _hot_pattern

    hot = _hot_pattern()
    text = (b"plain\nuse token x\ntokens 5\ntokenizer gpt2\ntokenise\na token\nid AKIAxyz\nid akiaxyz\n"
            b"PassWord=1\nhttps://x\nsee glpat-abc\nGLPAT-abc\nthe xoxb thing\n")
    assert [m.group(0) for m in hot.finditer(text)] == [
        b"use token x", b"a token", b"id AKIAxyz", b"PassWord=1", b"https://x", b"see glpat-abc", b"the xoxb thing"]


def test_guards() -> None:
    from ledger.redact import _hit, _keep

    assert _hit(None, "anything", "anything")
    assert not _hit(("AKC",), "akc", "akc") and _hit(("AKC",), "xAKC", "xakc")
    assert _hit(("key",), "KEY", "key") and not _hit(("key", "pw"), "none", "none")
    m = re.match(r"(a)(b)c", "abc")
    assert _keep(2)(m) == f"b{R}" and _keep(1, "@")(m) == f"a{R}@"


def test_the_rules_file_is_written_by_the_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import ledger.redact as redact

    committed = redact.RULES_FILE.read_text()
    target = tmp_path / "rules.json"
    monkeypatch.setattr(redact, "RULES_FILE", target)
    redact._main()
    assert target.read_text() == committed  # the installed detect-secrets gives the committed file
    assert capsys.readouterr().out == f"wrote {target}\n"

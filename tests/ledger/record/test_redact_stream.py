"""Redaction of the output log as the tee does it: long batches scanned once for the lines where a rule may
match (bytes in, bytes out), with the same result as redacting each line on its own, and secrets that a
write or a batch boundary splits still removed whole."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pytest

from ledger.record.tee import BATCH, Tee
from ledger.redact import REDACTED, SMALL_TEXT, Redactor, StreamRedactor, literal_starts

B64 = "Zq8xW2vR7tY1uI3oP5aS9dF4gH6jK0lM"
PLANTED = [  # (a printed line, the secret in it): one of each kind of rule
    ("connecting with --db-pass " + B64[:20], B64[:20]),
    ('{"user": "a", "pass": "' + B64[:18] + '"}', B64[:18]),
    ("db_pass: " + B64[:16], B64[:16]),
    ("mysql -uroot -p" + B64[:14] + " -h db", B64[:14]),
    ("curl -u admin:" + B64[:15] + " https://api.example", B64[:15]),
    ("Authorization: Bearer " + B64[:24], B64[:24]),
    ("password=" + B64[:12], B64[:12]),
    ("fetching https://svc:" + B64[:13] + "@data.example/x", B64[:13]),
    ("WANDB_API_KEY=" + B64[:22], B64[:22]),
    ("found glpat-" + B64[:20] + " in the cache", "glpat-" + B64[:20]),
    ("found AIza" + (B64 * 2)[:35] + " here", "AIza" + (B64 * 2)[:35]),
    ("found sk_live_" + B64[:24] + " here", "sk_live_" + B64[:24]),
    ("found ghp_" + (B64 * 2)[:36] + " here", "ghp_" + (B64 * 2)[:36]),
    ("id AKIAABCDEFGHIJKLMNOP ok", "AKIAABCDEFGHIJKLMNOP"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJ" + B64 + ".c2lnbmF0dXJl", "eyJ" + B64),
    ("found SK" + "0123456789abcdef" * 2 + " twilio", "SK" + "0123456789abcdef" * 2),
    ("npm config //registry.npmjs.org/:_authToken=npm_" + B64, "npm_" + B64),
    ("found xoxb-12345678901-" + B64.lower()[:24], B64.lower()[:24]),
    ("token hf_abcdefghijklmnopqrstuvwxyz01234 used", "hf_abcdefghijklmnopqrstuvwxyz01234"),
    ("session eyJhbGciOiJIUzI1NiJ9.eyJ" + B64 + "." + B64[::-1], B64[::-1]),  # a JWT's signature (issue 34)
    ("  wandb_api_key ................ " + "fedcba9876543210" * 2 + "abcd1234", "fedcba9876543210" * 2),
    ("get https://b.s3.amazonaws.com/k?X-Amz-Signature=" + "9f" * 32 + "&x=1", "9f" * 32),
    ("get https://a.blob.core.windows.net/c/b?sv=2022-11-02&sig=" + B64 + "%3D", B64),
]
FILLER = "".join(f"2026-12-01 10:00:{i % 60:02d} INFO train.py:212] step {i} | loss {4 / (1 + i):.5f} | "
                 f"tokens/s 51234 | tokenizer gpt2 | lr 3.0e-04\n" for i in range(60))


def test_the_filler_is_a_long_text_without_secrets() -> None:
    assert len(FILLER) > SMALL_TEXT and Redactor({}).text(FILLER) == FILLER


@pytest.mark.parametrize(("line", "secret"), PLANTED)
def test_a_line_in_a_long_batch_is_redacted_as_on_its_own(line: str, secret: str) -> None:
    r = Redactor({})
    alone = r.text(line)
    assert secret not in alone and REDACTED in alone
    batch = (FILLER + line + "\n" + FILLER).encode()
    out = StreamRedactor(r).feed_bytes(batch)
    assert out == (FILLER + alone + "\n" + FILLER).encode()
    assert r.text(batch.decode()) == out.decode()  # the str path takes the same way


def test_secret_values_and_invalid_bytes_in_a_long_batch() -> None:
    r = Redactor({"MY_SECRET": "plain-words-9"})
    batch = FILLER.encode() + b"echo plain-words-9 \xff\xfe done\n" + FILLER.encode()
    out = StreamRedactor(r).feed_bytes(batch).decode("utf-8")
    assert "plain-words-9" not in out and f"echo {REDACTED} \ufffd\ufffd done\n" in out


def test_token_shapes_have_literal_starts() -> None:
    import re

    assert literal_starts(re.compile(r"(ghp|gho)_[A-Z]{3}")) == ["gho_", "ghp_"]
    assert literal_starts(re.compile(r"xox[ab]-\d+")) == ["xoxa-", "xoxb-"]
    assert literal_starts(re.compile(r"[A-Z]{4}\d")) is None  # no literal start: run over the whole text


def _tee(tmp_path: Path, writes: list[bytes], redactor: Redactor) -> bytes:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    log = tmp_path / "output.log"
    seen: list[bytes] = []
    tee = Tee(log, StreamRedactor(redactor).feed_bytes, (io.BytesIO(), io.BytesIO()), consumer=seen.append)
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))

    def child() -> None:
        for w in writes:
            view = memoryview(w)
            while view:
                view = view[os.write(out_w, view):]
        os.close(out_w)
        os.close(err_w)

    t = threading.Thread(target=child)
    t.start()
    t.join()
    assert tee.finish(os.getpid() + 10**7) == []
    assert b"".join(seen) == log.read_bytes()  # the live parser saw what the log keeps
    return log.read_bytes()


def test_secrets_split_over_writes_and_over_a_batch_boundary(tmp_path: Path) -> None:
    r = Redactor({"MY_SECRET": "plain-words-9"})
    lines = [line for line, _ in PLANTED] + ["echo plain-words-9"]
    writes: list[bytes] = []
    for line in lines:  # each line written in two pieces, cut inside its secret
        data = (line + "\n").encode()
        writes += [data[: len(data) * 2 // 3], data[len(data) * 2 // 3:]]
    head = (FILLER * (BATCH // len(FILLER) + 1)).encode()[: BATCH - 30]
    head = head[: head.rfind(b"\n") + 1] + b"x" * (BATCH - 30 - head.rfind(b"\n") - 1)
    writes = [head + b" " + writes[0]] + writes[1:]  # the first secret straddles the writer's first batch
    log = _tee(tmp_path, writes, r).decode()
    for _, secret in [*PLANTED, ("", "plain-words-9")]:
        assert secret not in log
    assert log.count(REDACTED) >= len(lines) and log.endswith(f"echo {REDACTED}\n")


def test_a_pem_block_over_a_batch_boundary_is_redacted_whole(tmp_path: Path) -> None:
    body = [B64 + B64[:i] for i in range(12)]
    block = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END PRIVATE KEY-----\nafter\n"
    head = ("ok line\n" * (BATCH // 8))[: BATCH - 200]
    log = _tee(tmp_path, [head.encode() + block.encode()], Redactor({})).decode()
    assert not any(line in log for line in body) and log.endswith(f"{REDACTED}\nafter\n")

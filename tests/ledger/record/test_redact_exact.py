"""Redaction at its exact edges: the shortest environment secret replaced everywhere, numbers under names
with a strong secret word, secrets in the keys of a JSON document (issue 23's planted bugs)."""

from __future__ import annotations

from ledger.redact import MIN_SECRET_VALUE, REDACTED, Redactor, redact_json, secret_value


def test_the_minimum_secret_length_is_six_characters_on_both_sides_of_the_edge() -> None:
    assert MIN_SECRET_VALUE == 6  # the documented edge: five-character values are too common to replace
    r = Redactor({"HF_TOKEN": "k3y9Qz", "WANDB_API_KEY": "k3y9Q"})
    # the 6-character value is replaced wherever it appears; the 5-character one is not (by design)
    assert r.text("loaded k3y9Qz from cache") == f"loaded {REDACTED} from cache"
    assert r.text("see k3y9Q here") == "see k3y9Q here"


def test_a_number_under_a_strong_secret_name_is_a_secret() -> None:
    # KEY or TOKEN alone with a number is a size (top-k, a token count); SECRET/PASSWORD make it a secret
    assert secret_value("DB_SECRET_KEY", "123456") is True
    assert secret_value("DB_PASSWORD_TOKEN", "42") is True
    assert secret_value("MOE_ROUTER_TOPK_KEY", "8") is False
    assert secret_value("MAX_TOKEN", "4096") is False
    r = Redactor({})
    assert r.text("DB_SECRET_KEY=123456") == f"DB_SECRET_KEY={REDACTED}"
    assert r.text("--db-secret-key 123456") == f"--db-secret-key {REDACTED}"
    assert r.text("MAX_TOKEN=4096") == "MAX_TOKEN=4096"


def test_secrets_in_json_keys_are_redacted_as_well_as_values() -> None:
    r = Redactor({"HF_TOKEN": "hf_abcdefghijklmnop"})
    doc = {"hf_abcdefghijklmnop": 1, "nested": {"db_secret": 1234, "layers": 4}, "list": ["hf_abcdefghijklmnop"]}
    out = redact_json(doc, r.text)
    assert out == {REDACTED: 1, "nested": {"db_secret": REDACTED, "layers": 4}, "list": [REDACTED]}


def test_the_shells_working_directory_is_not_a_password() -> None:
    from ledger.redact import looks_secret

    # PWD and OLDPWD are where the shell is: taking them for passwords redacted the run's own directory from
    # every path (`<redacted>/.venv/bin/python` in the command, which `ledger ab` then refused to rerun)
    r = Redactor({"PWD": "/home/me/project", "OLDPWD": "/home/me/other", "DB_PWD": "hunter22"})
    argv = r.argv(["/home/me/project/.venv/bin/python", "train.py", "--out", "/home/me/other/ckpt"])
    assert argv == ["/home/me/project/.venv/bin/python", "train.py", "--out", "/home/me/other/ckpt"]
    assert r.text("saved /home/me/project/ckpt, db hunter22") == f"saved /home/me/project/ckpt, db {REDACTED}"
    assert not looks_secret("PWD") and not looks_secret("OLDPWD")
    assert looks_secret("DB_PWD") and looks_secret("pwd") and looks_secret("MYSQL_PWD")  # still passwords

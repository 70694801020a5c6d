"""Corruption and tamper evidence: `ledger verify` names the damaged file of the damaged receipt, commands
that need it refuse, the rest of the ledger keeps working; `ledger attest` emits a checkable in-toto
Statement."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, child_env
from helpers import ids_in, receipt_dir


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real receipts, recorded once for the module; each test damages its own copy."""
    root = tmp_path_factory.mktemp("template")
    script = root / "train.py"
    script.write_text("import ledger.sdk\nrun = ledger.sdk.current()\n"
                      "for s in range(1, 6):\n    run.log_step(s, loss=1.0 / s, tokens=s * 10)\n"
                      "    run.log_routing(s, 0, [4, 6])\nrun.log_eval(5, 0.5)\n")
    for name in ("a", "b", "c"):
        subprocess.run([str(BIN / "ledger"), "record", "--name", name, "--telemetry-interval", "0", "--",
                        "python", str(script)], env=child_env(LEDGER_DIR=str(root / "receipts")), check=True,
                       capture_output=True)
    return root / "receipts"


@pytest.fixture
def ledger3(template: Path, ledger_dir: Path, ledger_cli) -> list[str]:
    shutil.copytree(template, ledger_dir)
    return [r["id"] for r in json.loads(ledger_cli("ls", "--json").stdout)]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _garbage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 16] = b"\xde\xad\xbe\xef" * 4
    path.write_bytes(bytes(data))


def _edit_value(path: Path) -> None:
    data = json.loads(path.read_text())
    data["summary"]["final_loss"] = 0.001  # a better number, still a valid receipt
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


DAMAGE = {
    "truncated parquet": ("steps.parquet", _truncate, "size"),
    "garbage parquet": ("routing.parquet", _garbage, "sha256 does not match"),
    "edited receipt": ("receipt.json", _edit_value, "edited after publishing"),
    "missing file": ("evals.parquet", lambda p: p.unlink(), "missing"),
    "added file": ("extra.bin", lambda p: p.write_bytes(b"x"), "not listed"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damage_is_named_and_contained(kind: str, ledger3, ledger_cli, ledger_dir) -> None:
    victim, healthy = ledger3[1], [ledger3[0], ledger3[2]]
    filename, damage, message = DAMAGE[kind]
    damage(receipt_dir(ledger_dir, victim) / filename)
    out = ledger_cli("verify")
    assert out.returncode == 1
    assert f"{victim[:12]} {filename}: " in out.stdout and message in out.stdout
    assert "3 receipt(s) checked, 1 damaged" in out.stdout
    assert ledger_cli("verify", healthy[0]).returncode == 0
    one = ledger_cli("verify", victim[:10])
    assert one.returncode == 1 and filename in one.stdout
    refused = ledger_cli("show", victim)
    assert refused.returncode != 0 and refused.stderr.startswith("Error: ") and "damaged" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # the rest of the ledger keeps working, from a rebuilt index too
    assert ledger_cli("reindex").returncode == 0
    for rid in healthy:
        assert ledger_cli("show", rid).returncode == 0
    rows = json.loads(ledger_cli("query", "--json", "SELECT DISTINCT receipt_id FROM steps ORDER BY 1").stdout)
    assert [r["receipt_id"] for r in rows] == sorted(healthy)


def test_attestation_is_checkable_with_standard_tools(ledger3, ledger_cli, ledger_dir, tmp_path) -> None:
    rid = ledger3[0]
    out = ledger_cli("attest", rid[:8], "-o", str(tmp_path / "s.json"))
    assert out.returncode == 0, out.stderr
    stmt = json.loads((tmp_path / "s.json").read_text())
    assert stmt["_type"] == "https://in-toto.io/Statement/v1" and stmt["predicateType"]
    assert stmt["predicate"]["receipt_id"] == rid and "workload" in stmt["predicate"]
    names = {s["name"] for s in stmt["subject"]}
    assert f"{rid[:2]}/{rid}/receipt.json" in names and f"{rid[:2]}/{rid}/steps.parquet" in names
    # every subject digest checks out with coreutils' sha256sum, run from the ledger directory
    sums = "".join(f"{s['digest']['sha256']}  {s['name']}\n" for s in stmt["subject"])
    check = subprocess.run(["sha256sum", "-c", "-"], input=sums, text=True, capture_output=True, cwd=ledger_dir)
    assert check.returncode == 0, check.stdout + check.stderr
    # after tampering, the statement no longer verifies and attest refuses
    _edit_value(receipt_dir(ledger_dir, rid) / "receipt.json")
    check = subprocess.run(["sha256sum", "-c", "-"], input=sums, text=True, capture_output=True, cwd=ledger_dir)
    assert check.returncode != 0
    refused = ledger_cli("attest", rid)
    assert refused.returncode == 1 and "cannot attest a damaged receipt" in refused.stderr


def test_verify_of_a_clean_ledger(ledger3, ledger_cli, ledger_dir) -> None:
    out = ledger_cli("verify", "--json")
    assert out.returncode == 0
    assert json.loads(out.stdout) == {"checked": 3, "findings": []}
    assert len(ids_in(ledger_dir)) == 3


def _tamper(ledger_dir: Path, *statements: tuple[str, list[object]]) -> None:
    import duckdb

    con = duckdb.connect(str(ledger_dir / "index.duckdb"))
    try:
        for sql, params in statements:
            con.execute(sql, params)
    finally:
        con.close()


def test_tampered_index_is_named_by_verify_and_refused_by_compare(ledger3, ledger_cli, ledger_dir) -> None:
    a, b, c = ledger3
    ledger_cli("ls", check=True)  # the index exists and is synced
    _tamper(ledger_dir,
            ("UPDATE steps SET loss = loss / 2 WHERE receipt_id = ?", [a]),  # invented better losses
            ("DELETE FROM routing WHERE receipt_id = ? AND step = 1", [c]),
            ("UPDATE receipts SET receipt = json_object('id', id) WHERE id = ?", [c]),
            ("INSERT INTO damaged VALUES (?, 'made up')", [b]))  # a healthy receipt marked damaged
    out = ledger_cli("verify")
    assert out.returncode == 1
    for victim, message in ((a, "table steps: 5 rows in the index, 5 in steps.parquet, values differ"),
                            (c, "table routing: 4 rows in the index, 5 in routing.parquet"),  # a row per step (1 layer)
                            (c, "its receipts row differs from receipt.json"), (b, "listed as damaged (made up)")):
        assert f"{victim[:12]} index.duckdb: {message}" in out.stdout, out.stdout
    refused = ledger_cli("compare", a, b, "--json")
    assert refused.returncode == 1 and "index.duckdb: table steps" in refused.stderr
    refused = ledger_cli("claim", a, b, "--json")  # a claim is a comparison too: no claim from a tampered index
    assert refused.returncode == 1 and "index.duckdb: table steps" in refused.stderr
    assert ledger_cli("reindex").returncode == 0
    assert ledger_cli("verify").returncode == 0


def test_the_file_side_is_cached_by_digest_and_the_index_side_never(ledger3, ledger_cli, ledger_dir) -> None:
    from ledger.errors import DamagedReceipt
    from ledger.store import index
    from ledger.store.agreement import check_involved
    from ledger.store.receipts import Ledger

    a = ledger3[0]
    ledger_cli("ls", check=True)
    led = Ledger(ledger_dir)
    artifacts = json.loads((receipt_dir(ledger_dir, a) / "receipt.json").read_text())["artifacts"]
    tables = {art["path"]: art["sha256"] for art in artifacts if art["kind"] == "table" and art["rows"]}
    assert "steps.parquet" in tables
    cache = ledger_dir / ".cache" / "fingerprints"
    with index.reader(led) as con:
        check_involved(led, con, [a])
    cached = {p.name.split("-")[0]: p for p in cache.glob("*.json")}
    assert set(cached) == set(tables.values())  # one entry per table file, named by its digest
    steps_entry = cached[tables["steps.parquet"]]
    truth = json.loads(steps_entry.read_text())
    assert truth[0] == 5  # the row count of the five steps logged
    # the index side is never cached: a tampered index is still found with every file side cached
    _tamper(ledger_dir, ("UPDATE steps SET loss = loss / 2 WHERE receipt_id = ?", [a]))
    with index.reader(led) as con, pytest.raises(DamagedReceipt, match="table steps: 5 rows in the index, 5 in "
                                                                          "steps.parquet, values differ"):
        check_involved(led, con, [a])
    import ledger as api  # the Python API's compare makes the same check as the CLI's

    with pytest.raises(DamagedReceipt, match="table steps"):
        api.open(ledger_dir).compare(a, ledger3[1])
    assert ledger_cli("reindex").returncode == 0
    # the cache is what the file side is read from: a planted wrong entry is believed (it is keyed by the
    # verified digest, so only a hand edit can make it wrong) ...
    steps_entry.write_text(json.dumps([6, *truth[1:]]))
    with index.reader(led) as con, pytest.raises(DamagedReceipt, match="5 rows in the index, 6 in steps.parquet"):
        check_involved(led, con, [a])
    # ... and a torn one is computed again and rewritten, never fatal
    steps_entry.write_text('[5, 12')
    with index.reader(led) as con:
        check_involved(led, con, [a])
    assert json.loads(steps_entry.read_text()) == truth


def test_compare_refuses_a_receipt_damaged_after_indexing(ledger3, ledger_cli, ledger_dir) -> None:
    a, b = ledger3[0], ledger3[1]
    ledger_cli("ls", check=True)
    _garbage(receipt_dir(ledger_dir, a) / "steps.parquet")
    refused = ledger_cli("compare", a, b)
    assert refused.returncode == 1 and "sha256 does not match" in refused.stderr


def _keypair(directory: Path, name: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    priv, pub = directory / f"{name}.pem", directory / f"{name}.pub"
    priv.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    pub.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub


def test_signed_attestation_verifies_and_fails_after_tampering(ledger3, ledger_cli, ledger_dir, tmp_path) -> None:
    import base64

    rid = ledger3[0]
    priv, pub = _keypair(tmp_path, "signer")
    _, other_pub = _keypair(tmp_path, "other")
    out = tmp_path / "a.dsse.json"
    assert ledger_cli("attest", rid, "--sign", str(priv), "-o", str(out)).returncode == 0
    envelope = json.loads(out.read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json" and len(envelope["signatures"]) == 1
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicate"]["receipt_id"] == rid
    ok = ledger_cli("verify", "--attestation", str(out), "--key", str(pub))
    assert ok.returncode == 0 and "signature verified" in ok.stdout, ok.stdout + ok.stderr
    wrong_key = ledger_cli("verify", "--attestation", str(out), "--key", str(other_pub))
    assert wrong_key.returncode == 1 and "signature does not verify" in wrong_key.stdout
    # a payload changed after signing (a better loss claimed) fails the signature
    statement["predicate"]["summary"]["final_loss"] = 0.001
    forged = dict(envelope, payload=base64.b64encode(json.dumps(statement).encode()).decode())
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    assert ledger_cli("verify", "--attestation", str(tmp_path / "forged.json"), "--key", str(pub)).returncode == 1
    # a file changed after signing fails its digest, with the signature still valid
    _garbage(receipt_dir(ledger_dir, rid) / "steps.parquet")
    damaged = ledger_cli("verify", "--attestation", str(out), "--key", str(pub))
    assert damaged.returncode == 1 and f"{rid}/steps.parquet: sha256 does not match" in damaged.stdout


def test_ls_names_rows_whose_files_changed_or_went_after_indexing(ledger3, ledger_cli, ledger_dir) -> None:
    a, b, c = ledger3
    ledger_cli("ls", check=True)  # indexed while intact
    size = (receipt_dir(ledger_dir, a) / "steps.parquet").stat().st_size
    _truncate(receipt_dir(ledger_dir, a) / "steps.parquet")
    _edit_value(receipt_dir(ledger_dir, b) / "receipt.json")
    (receipt_dir(ledger_dir, c) / "evals.parquet").unlink()
    out = ledger_cli("ls", "--json", check=True)
    problems = {r["id"]: r["index_problem"] for r in json.loads(out.stdout)}
    assert problems[a] == f"steps.parquet has changed (100 bytes; the receipt says {size})"
    assert problems[b] == "receipt.json differs from its row in the index"
    assert problems[c] == "evals.parquet is gone"
    for victim in (a, b, c):
        assert f"ledger: receipt {victim[:12]}: " in out.stderr
    shutil.rmtree(receipt_dir(ledger_dir, a))
    shutil.rmtree(receipt_dir(ledger_dir, b))
    (receipt_dir(ledger_dir, c) / "receipt.json").unlink()
    out = ledger_cli("ls", "--json", check=True)
    assert [(r["id"], r["index_problem"]) for r in json.loads(out.stdout)] == [
        (c, f"{receipt_dir(ledger_dir, c) / 'receipt.json'} is missing")]


UNVERIFIED = "ledger: the index is unverified: "


def test_an_edited_receipts_row_is_found_and_the_index_is_said_unverified(ledger3, ledger_cli, ledger_dir) -> None:
    """Issue 34, item 2: forged ``final_loss``, ``tokens_per_s`` and ``name`` in the index's receipts table passed
    `ledger verify` (exit 0), and `ls` and `query` showed them. Now verify names each edited column, `ls` flags the
    row, `query` (arbitrary SQL: it cannot check what it shows) says the index is unverified, and a later sync by
    ledger does not make the edit verified: only `reindex` (or a verify that finds the index true) does."""
    a, b, c = ledger3
    before = json.loads(ledger_cli("ls", "--json", check=True).stdout)
    assert all(r["index_problem"] is None for r in before)
    loss = next(r["final_loss"] for r in before if r["id"] == a)
    _tamper(ledger_dir,
            ("UPDATE receipts SET final_loss = 0.001, tokens_per_s = 1e9 WHERE id = ?", [a]),
            ("UPDATE receipts SET name = 'forged' WHERE id = ?", [b]))
    out = ledger_cli("verify")
    assert out.returncode == 1
    edited = "its receipts row differs from receipt.json in final_loss, tokens_per_s"
    assert f"{a[:12]} index.duckdb: {edited}" in out.stdout
    assert f"{b[:12]} index.duckdb: its receipts row differs from receipt.json in name" in out.stdout
    assert c[:12] not in out.stdout
    listed = ledger_cli("ls", "--json", check=True)
    problems = {r["id"]: r["index_problem"] for r in json.loads(listed.stdout)}
    assert problems == {a: "its row in the index differs from receipt.json in final_loss, tokens_per_s",
                        b: "its row in the index differs from receipt.json in name", c: None}
    assert UNVERIFIED + "index.duckdb changed after ledger last wrote it" in listed.stderr
    queried = ledger_cli("query", "--json", "SELECT name, final_loss FROM receipts ORDER BY name")
    assert queried.returncode == 0 and UNVERIFIED in queried.stderr
    assert {"name": "forged", "final_loss": loss} in json.loads(queried.stdout)  # shown, but said to be unverified
    refused = ledger_cli("compare", a, c, "--json")
    assert refused.returncode == 1 and "its receipts row differs from receipt.json in final_loss" in refused.stderr
    # ledger writes the index again (a new receipt, indexed by the next reader): the edit stays unverified
    ledger_cli("record", "--name", "later", "--telemetry-interval", "0", "--", "true", check=True)
    again = ledger_cli("ls", "--json", check=True)
    assert len(json.loads(again.stdout)) == 4 and UNVERIFIED in again.stderr
    assert ledger_cli("reindex").returncode == 0
    assert ledger_cli("verify").returncode == 0
    clean = ledger_cli("query", "--json", "SELECT name FROM receipts")
    assert clean.returncode == 0 and UNVERIFIED not in clean.stderr and "forged" not in clean.stdout


def test_an_outside_write_that_changed_nothing_is_cleared_by_a_whole_verify(ledger3, ledger_cli, ledger_dir) -> None:
    """The stamp records what ledger last wrote; a `duckdb` session that wrote the file (here: a table made and
    dropped) makes the index unverified; `ledger verify` of the whole ledger finds it true and says so for good."""
    ledger_cli("ls", check=True)
    assert UNVERIFIED not in ledger_cli("query", "SELECT count(*) FROM receipts", check=True).stderr
    _tamper(ledger_dir, ("CREATE TABLE scratch (a INTEGER)", []), ("DROP TABLE scratch", []), ("CHECKPOINT", []))
    assert UNVERIFIED in ledger_cli("query", "SELECT count(*) FROM receipts", check=True).stderr
    assert ledger_cli("verify", a := ledger3[0]).returncode == 0  # one receipt checked: not the whole index
    assert UNVERIFIED in ledger_cli("query", "SELECT count(*) FROM receipts", check=True).stderr, a
    verified = ledger_cli("verify")
    assert verified.returncode == 0 and UNVERIFIED not in verified.stderr
    assert UNVERIFIED not in ledger_cli("query", "SELECT count(*) FROM receipts", check=True).stderr


def test_rows_planted_for_a_receipt_the_index_does_not_hold_are_found(ledger3, ledger_cli, ledger_dir) -> None:
    ledger_cli("ls", check=True)
    _tamper(ledger_dir, ("INSERT INTO steps (receipt_id, step, loss) VALUES (?, 1, 0.5)", ["f" * 64]))
    out = ledger_cli("verify")
    assert out.returncode == 1
    assert f"{'f' * 12} index.duckdb: table steps: 1 rows of a receipt the index does not hold" in out.stdout

"""`ledger serve` trusts only what is true (issue 34, items 3 and 4): a real server over real receipts answers only
requests addressed to a name it is served as (a page that rebinds its DNS name to 127.0.0.1 sends its own name as
``Host``), and refuses, as `ledger compare` and `report` do, receipts whose files or index rows disagree; while
the index is unverified every page says so. The refusal is also read in headless Chromium."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium import Browser, find_chromium
from conftest import BIN, child_env
from helpers import receipt_dir

pytestmark = pytest.mark.slow  # real runs and servers: about 15 s for the module

SCRIPT = """
import ledger.sdk
run = ledger.sdk.current()
run.set_workload({"seed": 7, "model": {"num_experts": 4, "top_k": 2}})
for step in range(1, 9):
    run.log_step(step, loss=4.0 / step, tokens=step * 256, step_time_s=0.01, tokens_per_s=25600.0)
run.log_eval(8, 0.6, metric="loss", split="val")
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real receipts (``alpha``, ``beta``), recorded once; each test serves its own copy."""
    root = tmp_path_factory.mktemp("trust")
    (root / "train.py").write_text(textwrap.dedent(SCRIPT))
    for name in ("alpha", "beta"):
        subprocess.run([str(BIN / "ledger"), "--ledger", str(root / "receipts"), "record", "--name", name,
                        "--telemetry-interval", "0", "--", "python", "train.py"], cwd=root, env=child_env(),
                       check=True, capture_output=True, timeout=120)
    subprocess.run([str(BIN / "ledger"), "--ledger", str(root / "receipts"), "ls"], env=child_env(), check=True,
                   capture_output=True, timeout=60)  # indexed while intact
    return root / "receipts"


def _ids(ledger: Path) -> dict[str, str]:
    out = subprocess.run([str(BIN / "ledger"), "--ledger", str(ledger), "ls", "--json"], env=child_env(), check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return {r["name"]: r["id"] for r in json.loads(out)}


class Served:
    """A `ledger serve` process on a free port of 127.0.0.1."""

    def __init__(self, ledger: Path, *args: str) -> None:
        self.proc = subprocess.Popen([str(BIN / "ledger"), "--ledger", str(ledger), "serve", "--port", "0", *args],
                                     env=child_env(), stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, line
        self.port = int(match.group(1))

    def get(self, path: str, host: str | None = None) -> tuple[int, str]:
        """(status, body) of a GET sent to 127.0.0.1 with ``host`` as its Host header (default: 127.0.0.1:PORT)."""
        con = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            con.putrequest("GET", path, skip_host=True)
            con.putheader("Host", host if host is not None else f"127.0.0.1:{self.port}")
            con.endheaders()
            response = con.getresponse()
            return response.status, response.read().decode()
        finally:
            con.close()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        assert self.proc.stderr is not None
        self.proc.stderr.close()


@pytest.fixture
def ledger_copy(template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "receipts"
    shutil.copytree(template, target)
    return target


@pytest.fixture
def served(ledger_copy: Path) -> Iterator[Served]:
    server = Served(ledger_copy)
    try:
        yield server
    finally:
        server.close()


def test_only_the_names_it_is_served_as_are_answered(served: Served, ledger_copy: Path) -> None:
    """Before: ``Host: evil.example`` got the receipts table (200)."""
    for host in ("evil.example", f"evil.example:{served.port}", "127.0.0.1.evil.example", "", "localhost.evil"):
        status, body = served.get("/", host=host)
        assert (status, body) == (400, "Invalid host header"), host
    status, _ = served.get("/api/live/" + "0" * 32, host="evil.example")
    assert status == 400
    for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", "localhost", f"[::1]:{served.port}"):
        status, body = served.get("/", host=host)
        assert status == 200 and "alpha" in body, host
    other = Served(ledger_copy, "--allow-host", "ledger.example")
    try:
        assert other.get("/", host=f"ledger.example:{other.port}")[0] == 200
        assert other.get("/", host="evil.example")[0] == 400
    finally:
        other.close()


def _tamper(ledger: Path, sql: str, params: list[object]) -> None:
    import duckdb

    con = duckdb.connect(str(ledger / "index.duckdb"))
    try:
        con.execute(sql, params)
    finally:
        con.close()


def test_a_tampered_index_is_refused_and_said_unverified(served: Served, ledger_copy: Path) -> None:
    """Before: /compare and the overlay answered 200 with the halved losses of a tampered steps table."""
    ids = _ids(ledger_copy)
    a, b = ids["alpha"], ids["beta"]
    assert served.get(f"/compare?id={a[:8]}&id={b[:8]}")[0] == 200
    status, body = served.get("/")
    assert status == 200 and 'id="unverified"' not in body
    _tamper(ledger_copy, "UPDATE steps SET loss = loss / 2 WHERE receipt_id = ?", [a])
    for path in (f"/compare?id={a[:8]}&id={b[:8]}", f"/overlay?id={a[:8]}&id={b[:8]}", f"/receipt/{a[:8]}"):
        status, body = served.get(path)
        assert status == 409, (path, status)
        assert "table steps: 8 rows in the index, 8 in steps.parquet, values differ" in body, path
        assert 'id="unverified"' in body and "index.duckdb changed after ledger last wrote it" in body
    status, body = served.get(f"/receipt/{b[:8]}")  # the other receipt is intact, but the index is not trusted
    assert status == 200 and 'id="unverified"' in body
    find_chromium()
    browser = Browser(ledger_copy.parent / "profile")
    try:
        browser.goto(f"http://127.0.0.1:{served.port}/compare?id={a[:8]}&id={b[:8]}")
        text = browser.evaluate("document.body.textContent")
        assert "values differ" in text and "The index is unverified" in text
        assert browser.evaluate("document.querySelectorAll('.plot').length") == 0
    finally:
        browser.close()


def test_receipts_whose_files_were_edited_or_removed_are_refused(served: Served, ledger_copy: Path) -> None:
    """Before: the overlay and the table rendered runs whose files were edited or missing."""
    ids = _ids(ledger_copy)
    a, b = ids["alpha"], ids["beta"]
    steps = receipt_dir(ledger_copy, a) / "steps.parquet"
    steps.write_bytes(steps.read_bytes()[:-20] + b"\0" * 20)  # same size, other bytes
    (receipt_dir(ledger_copy, b) / "evals.parquet").unlink()
    for path, needle in ((f"/overlay?id={a[:8]}", "steps.parquet: sha256 does not match"),
                         (f"/receipt/{a[:8]}", "steps.parquet: sha256 does not match"),
                         (f"/overlay?id={b[:8]}", "evals.parquet: missing"),
                         (f"/compare?id={a[:8]}&id={b[:8]}", "sha256 does not match")):
        status, body = served.get(path)
        assert status == 409 and needle in body, (path, status)
    status, body = served.get("/")
    assert status == 200
    assert f"receipt {b[:12]} (beta): evals.parquet is gone" in body  # the table says which rows disagree

"""The web view's pages (ledger/report/web/views.py, pages.py) in process, through Starlette's test client, as a
user opens them: a receipt by id prefix and by name (every curve's points against the values logged, evals per
source, time per phase summed by hand, the routing heatmap, bookkeeping, summary and factors, the team's notes),
a run that logged no tokens, two runs compared, a run in progress polled step by step until it is published, and
what a mistyped ref, a wrong number of runs or an unknown run says; every user text escaped."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

import ledger
import ledger.sdk
from ledger.report.web import pages
from ledger.report.web.app import create_app

EVIL = '<img src=x onerror="window.__pwned=1">'
STEPS = 6


def _arrays(value: Any) -> Any:
    """Plotly's JSON with its typed arrays (``{"dtype": "f8", "bdata": base64}``) as lists."""
    if isinstance(value, dict):
        if set(value) >= {"dtype", "bdata"}:
            flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
            shape = value.get("shape")
            return (flat.reshape([int(n) for n in str(shape).split(",")]) if shape else flat).tolist()
        return {k: _arrays(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_arrays(v) for v in value]
    return value


def _figures(page: str) -> dict[str, dict[str, Any]]:
    """The page's Plotly figures by their div id."""
    found = re.findall(r'<script type="application/json" class="fig" data-target="([^"]+)">(.*?)</script>', page)
    return {html.unescape(k): _arrays(json.loads(v)) for k, v in found}


def _record(lg: ledger.api.Ledger, name: str, tokens: bool = True, **tags: str) -> str:
    with lg.recording(name=name, tags=tags) as rec:
        run = ledger.sdk.current()
        run.set_workload({"model": {"num_experts": 4, "top_k": 2}, "precision": {"compute": "bf16"},
                          "batch": {"steps": STEPS}, "seed": 3})
        for step in range(1, STEPS + 1):
            metrics: dict[str, float] = {"loss": 4.0 / step, "lr": 1e-3 * step, "grad_norm": 1.0 + step / 10,
                                         "step_time_s": 0.5}
            if tokens:
                metrics.update(tokens=100 * step, tokens_per_s=200.0)
            run.log_step(step, **metrics)
            run.log_timing(step, "attention", 0.25)
            run.log_timing(step, "all_to_all", 0.125 * step)
        if tokens:
            run.log_eval(3, 2.0, split="val", source="rare", tokens=300)
            run.log_eval(6, 1.5, split="val")
            run.log_eval(6, 1.25, split="val", metric="acc", tokens=None)
            run.log_eval(6, None, split="val", metric="ppl")  # logged without a value: no point to draw
            for step in (2, 4, 6):
                run.log_routing(step, 0, [40, 10, 10, 20])
    return rec.receipt.id


def _client(lg: ledger.api.Ledger) -> TestClient:
    return TestClient(create_app(lg.store, poll_s=0.25), base_url="http://localhost")  # a Host the view answers


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two published runs, read only by the tests that use them (the views are called in each test, so mutmut
    counts each test's assertions; tests that write get a ledger of their own)."""
    lg = ledger.open(tmp_path_factory.mktemp("web") / "receipts")
    ids = {"base": _record(lg, "base", team="moe"), EVIL: _record(lg, EVIL, tokens=False, **{"k<": EVIL})}
    return {"lg": lg, "ids": ids, "client": _client(lg)}


@pytest.fixture
def empty(tmp_path: Path) -> dict[str, Any]:
    lg = ledger.open(tmp_path / "receipts")
    return {"lg": lg, "client": _client(lg)}


def test_a_receipt_page_draws_what_was_logged(site: dict[str, Any]) -> None:
    client, rid = site["client"], site["ids"]["base"]
    got = client.get(f"/receipt/{rid[:8]}")
    assert got.status_code == 200
    page = got.text
    assert "<title>receipt base</title>" in page and "<h1>receipt base</h1>" in page
    figs = _figures(page)
    assert set(figs) == {"curve-loss-tokens", "curve-loss-time", "curve-tokens_per_s-step", "curve-lr-step",
                         "curve-grad_norm-step", "curve-step_time_s-step", "evals", "timing", "routing-0"}
    steps = list(range(1, STEPS + 1))
    for key, x, y, title in (
            ("curve-loss-tokens", [100 * s for s in steps], [4.0 / s for s in steps], "training loss vs tokens"),
            ("curve-tokens_per_s-step", steps, [200.0] * STEPS, "tokens/s per step"),
            ("curve-lr-step", steps, [1e-3 * s for s in steps], "learning rate"),
            ("curve-grad_norm-step", steps, [1.0 + s / 10 for s in steps], "gradient norm"),
            ("curve-step_time_s-step", steps, [0.5] * STEPS, "step time")):
        (trace,) = figs[key]["data"]
        assert trace["x"] == pytest.approx(x) and trace["y"] == pytest.approx(y), key
        assert trace["name"] == f"base ({rid[:8]})" and figs[key]["layout"]["title"]["text"] == title
    (loss_t,) = figs["curve-loss-time"]["data"]
    assert loss_t["y"] == pytest.approx([4.0 / s for s in steps])
    assert loss_t["x"][0] >= 0 and loss_t["x"] == sorted(loss_t["x"])  # seconds of training, in order
    assert figs["curve-loss-time"]["layout"]["xaxis"]["title"]["text"] == "seconds since the first step"
    evals = {t["name"]: (t["x"], t["y"]) for t in figs["evals"]["data"]}
    assert set(evals) == {"val/rare/loss", "val/all/loss", "val/all/acc"}
    assert evals["val/rare/loss"] == ([300.0], [2.0])
    assert figs["evals"]["layout"]["xaxis"]["title"]["text"] == "tokens"
    assert figs["timing"]["layout"]["xaxis"]["title"]["text"] == "seconds"
    assert figs["timing"]["layout"]["title"]["text"] == "time per phase (sum over steps)"
    assert evals["val/all/loss"][1] == [1.5] and evals["val/all/acc"][1] == [1.25]
    assert figs["evals"]["data"][0]["mode"] == "lines+markers"
    (bars,) = figs["timing"]["data"]
    # sum over steps: attention 6 x 0.25 = 1.5 s, all_to_all 0.125 x (1 + ... + 6) = 2.625 s; smallest first
    assert bars["y"] == ["attention", "all_to_all"] and bars["x"] == pytest.approx([1.5, 2.625])
    (heat,) = figs["routing-0"]["data"]
    assert heat["type"] == "heatmap" and heat["y"] == ["e0", "e1", "e2", "e3"]
    # load per expert / the mean load (80 / 4 = 20): 2, 0.5, 0.5, 1 at every step
    assert [row[0] for row in heat["z"]] == pytest.approx([2.0, 0.5, 0.5, 1.0])
    assert "routing, layer 0: load per expert (1 = the mean)" in figs["routing-0"]["layout"]["title"]["text"]


def _table(page: str, table_id: str) -> dict[str, str]:
    body = re.search(rf'<table id="{table_id}">(.*?)</table>', page)
    assert body, table_id
    return {html.unescape(k): html.unescape(v)
            for k, v in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", body.group(1))}


def test_a_receipt_pages_bookkeeping_summary_and_factors(site: dict[str, Any]) -> None:
    client, rid, lg = site["client"], site["ids"]["base"], site["lg"]
    page = client.get("/receipt/base").text
    r = lg.get(rid)
    head = _table(page, "bookkeeping")
    assert list(head) == ["id", "name", "status", "exit code", "started", "duration", "attempt", "command", "tags"]
    assert (head["id"], head["name"], head["status"], head["exit code"], head["attempt"], head["tags"]) == (
        rid, "base", "succeeded", "0", "1", "team=moe")
    assert head["started"] == str(r.started_at) and head["command"] == " ".join(r.command)
    assert re.fullmatch(r"[\d.]+ s", head["duration"])
    summary = _table(page, "summary")
    assert (summary["steps"], summary["final_loss"], summary["tokens"], summary["tokens_per_s"]) == (
        "6", "0.6667", "600", "200 tok/s")
    factors = dict(re.findall(r"<h3>(.*?)</h3><table class=\"factor\">(.*?)</table>", page))
    assert "<td><code>workload.precision.compute</code></td><td>bf16</td>" in factors["precision"]
    assert "<td><code>workload.model.num_experts</code></td><td>4</td>" in factors["task"]
    assert "<td><code>workload.seed</code></td><td>3</td>" in factors["seed"]
    assert "record" not in factors and "run_uuid" not in page.split('id="bookkeeping"')[1]
    assert list(factors) == [f for f in ("code", "software", "kernels", "drivers", "container", "hardware",
                                         "parallelism", "precision", "router", "architecture", "hyperparameters",
                                         "arguments", "task", "data", "seed", "scale") if f in factors]
    assert '<div id="goodput"><svg' in page
    assert 'id="notes"' not in page
    packages = len(r.stack.software.packages)
    assert packages > 0 and \
        f"<td><code>stack.software.packages</code></td><td>{packages} packages</td>" in factors["software"]


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_browsing_writes_nothing_in_the_ledger(site: dict[str, Any]) -> None:
    client, ids, lg = site["client"], site["ids"], site["lg"]
    import shutil

    client.get(f"/receipt/{ids['base']}")  # the index brought up to date first, as a reader may
    # as in a ledger pulled from elsewhere: no cache of the tables' fingerprints, which a writer would fill
    shutil.rmtree(lg.root / ".cache" / "fingerprints", ignore_errors=True)
    before = _files(lg.root)
    for path in (f"/receipt/{ids['base']}", f"/receipt/{ids[EVIL][:8]}", f"/compare?id={ids['base']}&id={ids[EVIL]}",
                 "/live", "/receipt/nope"):
        assert client.get(path).status_code in (200, 400)
    assert _files(lg.root) == before  # no fingerprint cache, no index write: a reader that writes nothing


def test_a_receipt_page_shows_the_teams_notes(empty: dict[str, Any]) -> None:
    lg, client = empty["lg"], empty["client"]
    with lg.recording(name="noted") as rec:
        ledger.sdk.current().log_step(1, loss=1.0)
    rid = rec.receipt.id
    assert 'id="notes"' not in client.get(f"/receipt/{rid}").text
    lg.note(rid, "ran on a <degraded> node", author="alice")
    again = client.get(f"/receipt/{rid}").text
    assert re.search(r'<section id="notes"><h2>Notes</h2><ul><li class="note">\d{4}-\d\d-\d\d \d\d:\d\d alice: '
                     r"ran on a &lt;degraded&gt; node</li></ul></section>", again)


def test_a_run_that_logged_no_tokens_is_drawn_against_its_steps(site: dict[str, Any]) -> None:
    client, rid = site["client"], site["ids"][EVIL]
    got = client.get(f"/receipt/{rid[:10]}")
    assert got.status_code == 200
    figs = _figures(got.text)
    assert set(figs) == {"curve-loss-step", "curve-loss-time", "curve-lr-step", "curve-grad_norm-step",
                         "curve-step_time_s-step", "timing"}
    loss = figs["curve-loss-step"]
    assert loss["layout"]["title"]["text"] == "training loss vs step (the run logged no tokens)"
    assert loss["layout"]["xaxis"]["title"]["text"] == "step"
    assert loss["data"][0]["x"] == pytest.approx(range(1, STEPS + 1))
    assert loss["data"][0]["y"] == pytest.approx([4.0 / s for s in range(1, STEPS + 1)])
    # the user's text is shown, never markup: not in the page as HTML, escaped in every place it appears
    assert EVIL not in got.text and html.escape(EVIL) in got.text
    assert _table(got.text, "bookkeeping")["tags"] == f"k<={EVIL}"


@pytest.mark.parametrize(("path", "status", "said"), [
    ("/receipt/nope", 400, "no receipt has the id prefix or name &#x27;nope&#x27;; `ledger ls` lists them"),
    ("/compare?id=base", 400, "select exactly two runs to compare (got 1)"),
    ("/compare", 400, "select exactly two runs to compare (got 0)"),
    ("/live/nope", 400, "no run in progress named &#x27;nope&#x27; or with that staging uuid (it may be published: "
                        "see the receipts table)"),
])
def test_what_a_wrong_request_says(site: dict[str, Any], path: str, status: int, said: str) -> None:
    got = site["client"].get(path)
    assert got.status_code == status
    assert f'<p class="error">{said}</p><p><a href="/">back to the receipts</a></p>' in got.text


def test_two_runs_compared_by_id_or_by_a_and_b(site: dict[str, Any]) -> None:
    client, ids = site["client"], site["ids"]
    first = client.get(f"/compare?id={ids['base'][:8]}&id={ids[EVIL][:8]}")
    assert first.status_code == 200
    assert f"<title>ledger compare: base vs {html.escape(EVIL)}</title>" in first.text
    second = client.get("/compare", params={"a": "base", "b": ids[EVIL]})
    assert second.status_code == 200 and "<title>ledger compare: base vs " in second.text


def test_a_run_labelled_by_its_id_when_its_name_is_not_unique(empty: dict[str, Any]) -> None:
    lg, client = empty["lg"], empty["client"]
    one, twin = _record(lg, "same"), _record(lg, "same")
    got = client.get(f"/compare?id={twin[:12]}&id={one[:12]}")
    assert got.status_code == 200
    assert re.search(rf"<title>ledger compare: {twin[:8]}\S* vs {one[:8]}", got.text)


def test_a_run_in_progress_is_listed_polled_and_found_once_published(empty: dict[str, Any]) -> None:
    lg, client = empty["lg"], empty["client"]
    assert "<p>No run in progress.</p>" in client.get("/live").text
    with lg.recording(name="slow <b>") as rec:
        run = ledger.sdk.current()
        run.set_workload({"batch": {"steps": 10}})
        for step in (1, 2, 3):
            run.log_step(step, loss=4.0 / step, tokens=100 * step, tokens_per_s=250.0)
        run.flush()
        listed = client.get("/live").text
        uuid = re.search(r'<a href="/live/([0-9a-f]{8})([0-9a-f]+)">slow &lt;b&gt; \(\1\)</a>', listed)
        assert uuid, listed
        uuid_ = uuid.group(1) + uuid.group(2)
        assert '<table id="live"><tr><th>run</th><th>started</th></tr>' in listed
        live = client.get("/live/slow <b>").text
        assert client.get(f"/live/{uuid_[:6]}").text == live
        assert f"<title>slow &lt;b&gt; ({uuid_[:8]}) (in progress)</title>" in live
        assert f'var POLL_MS=250, SOURCE="/api/live/{uuid_}";' in live
        state = client.get(f"/api/live/{uuid_}").json()
        assert state["rows"] == 3 and state["receipt"] is None
        assert state["status"].startswith("step 3/10, loss 1.333, 250 tok/s, ETA ")
        (trace,) = _arrays(state["figure"])["data"]
        assert trace["x"] == [100, 200, 300] and trace["y"] == pytest.approx([4.0, 2.0, 4.0 / 3])
        assert state["figure"]["layout"]["title"]["text"] == "training loss vs tokens (live)"
        assert state["eta_s"] is None or state["eta_s"] >= 0
    done = client.get(f"/api/live/{uuid_}").json()
    assert done == {"status": "published", "rows": 0, "figure": None, "receipt": rec.receipt.id}
    assert client.get(f"/live/{uuid_}").status_code == 400
    assert client.get("/api/live/0000").json() == {"status": "not in progress and not published (yet)", "rows": 0,
                                                   "figure": None, "receipt": None}
    assert client.get("/api/live/ab").json()["status"] == "not in progress and not published (yet)"


def test_a_run_in_progress_before_its_first_step(empty: dict[str, Any]) -> None:
    lg, client = empty["lg"], empty["client"]
    with lg.recording(name="starting"):
        (uuid,) = re.findall(r'<a href="/live/([0-9a-f]+)">starting \(', client.get("/live").text)
        state = client.get(f"/api/live/{uuid}").json()
        assert state == {"status": "step -, loss -, -, ETA -", "rows": 0, "figure": None, "receipt": None,
                         "eta_s": None}


# pages.py: the pieces every page is made of -----------------------------------------------------------------

def test_escaping_and_urls() -> None:
    assert pages.e('<a href="x">&\'') == "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"
    assert pages.e(3) == "3"
    assert pages.url("/overlay", id=["a b", "c&d"], m=None, x="tokens") == \
        "/overlay?id=a+b&amp;id=c%26d&amp;x=tokens"
    assert pages.url("/live/x") == "/live/x"
    assert pages.url("/", where=None) == "/"
    assert pages.url("/", sort=("loss",)) == "/?sort=loss"


def test_the_frame_of_a_page_and_an_error_page() -> None:
    page = pages.page("a <title>", "<p>body</p>", "var x=1;")
    assert page.startswith("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
                           "content=\"width=device-width, initial-scale=1\"><title>")
    assert "<title>a &lt;title&gt;</title>" in page and "<main><h1>a &lt;title&gt;</h1><p>body</p></main>" in page
    assert page.endswith(f"<script>{pages.DRAW}var x=1;</script></body></html>\n")
    assert '<a href="/">receipts</a><a href="/live">runs in progress</a><a href="/history">history</a>' in page
    assert '<script src="/static/plotly.min.js"></script>' in page
    error = pages.error_page("oops", "bad <ref>")
    assert '<main><h1>oops</h1><p class="error">bad &lt;ref&gt;</p><p><a href="/">back to the receipts</a></p></main>' \
        in error
    marked = pages.unverified(page, "the index is newer than <files>")
    assert marked.count('id="unverified"') == 1
    assert ('<main><p class="error" id="unverified">The index is unverified: the index is newer than &lt;files&gt;. '
            "What this page shows from it may not be what the receipt files say: <code>ledger verify</code> "
            "compares them, <code>ledger reindex</code> rebuilds it.</p><h1>") in marked
    twice = pages.unverified(page.replace("</main>", "</main><main></main>"), "r")
    assert twice.count('id="unverified"') == 1


def test_figures_are_json_that_cannot_close_their_script() -> None:
    out = pages.figures([("a<b", {"data": [{"name": "</script><b>"}], "layout": {}})])
    assert out.startswith('<div class="plots"><div class="plot" id="a&lt;b"></div>')
    assert '<script type="application/json" class="fig" data-target="a&lt;b">' in out
    assert "</script><b>" not in out and out.endswith("</script></div>")
    (body,) = re.findall(r'class="fig" data-target="[^"]*">(.*?)</script>', out)
    assert json.loads(body) == {"data": [{"name": "</script><b>"}], "layout": {}}
    assert pages.figures([]) == '<div class="plots"></div>'


ROW = {"name": "fp8", "status": "failed", "problems": 2, "started_at": "2026-12-02T10:31:45+00:00",
       "duration_s": 185.0, "steps": 100, "final_loss": 2.34567, "tokens_per_s": 14523.0, "precision": "bf16",
       "num_experts": 8, "top_k": 2, "gpu_model": "H200"}
BARE = {"name": None, "status": "succeeded", "problems": 0, "started_at": None, "duration_s": None, "steps": None,
        "final_loss": None, "tokens_per_s": None, "precision": None, "num_experts": 0, "top_k": None,
        "gpu_model": None}


def test_the_table_cells_of_a_full_and_a_bare_row() -> None:
    full = {col: pages.cell(col, ROW) for col, _ in pages.COLUMNS}
    assert full == {"name": "<td>fp8</td>", "status": "<td>failed (2 problems)</td>",
                    "started": "<td>2026-12-02 10:31</td>", "time": '<td class="n">3m 05s</td>',
                    "steps": '<td class="n">100</td>', "loss": '<td class="n">2.346</td>',
                    "tok/s": '<td class="n">14.5k</td>', "precision": "<td>bf16</td>",
                    "experts": "<td>8x top2</td>", "gpu": "<td>H200</td>"}
    bare = {col: pages.cell(col, BARE) for col, _ in pages.COLUMNS}
    assert bare == {"name": "<td>-</td>", "status": "<td>succeeded</td>", "started": "<td>-</td>",
                    "time": '<td class="n">-</td>', "steps": '<td class="n">-</td>', "loss": '<td class="n">-</td>',
                    "tok/s": '<td class="n">-</td>', "precision": "<td>-</td>", "experts": "<td>-</td>",
                    "gpu": "<td>-</td>"}
    assert pages.cell("steps", {**BARE, "steps": 0}) == '<td class="n">0</td>'
    assert pages.cell("name", {**ROW, "name": "<b>x</b>"}) == "<td>&lt;b&gt;x&lt;/b&gt;</td>"


def test_a_receipt_page_from_its_parts() -> None:
    page = pages.receipt("receipt <x>", [("id", "abc"), ("name", "<b>")], {"precision": [("workload.p", "<bf16>")]},
                         [("steps", "6"), ("loss", "<1>")], [("curve", {"data": [], "layout": {}})], "<svg></svg>",
                         ["problem: telemetry: <none>"], "<section>top</section>")
    body = page.split("<main><h1>receipt &lt;x&gt;</h1>", 1)[1]
    assert body.startswith('<table id="bookkeeping"><tr><th>id</th><td>abc</td></tr><tr><th>name</th>'
                           "<td>&lt;b&gt;</td></tr></table><section>top</section>"
                           '<p class="note">problem: telemetry: &lt;none&gt;</p><h2>Metrics</h2><div class="plots">')
    assert '<h2>Goodput</h2><div id="goodput"><svg></svg></div>' in body
    assert ('<h2>Summary</h2><table id="summary"><tr><th>steps</th><td>6</td></tr><tr><th>loss</th><td>&lt;1&gt;</td>'
            "</tr></table>") in body
    assert ('<h2>Stack and workload, by factor</h2><div class="factors"><div><h3>precision</h3><table class="factor">'
            "<tr><td><code>workload.p</code></td><td>&lt;bf16&gt;</td></tr></table></div></div></main>") in body


def test_the_live_pages_from_their_parts() -> None:
    assert "<p>No run in progress.</p>" in pages.live_list([])
    listed = pages.live_list([("u1", "a <b>", "2026-12-02T10:00"), ("u 2", "c", "-")])
    assert "<title>runs in progress</title>" in listed and "<h1>runs in progress</h1>" in listed
    assert ('<table id="live"><tr><th>run</th><th>started</th></tr><tr><td><a href="/live/u1">a &lt;b&gt;</a></td>'
            '<td>2026-12-02T10:00</td></tr><tr><td><a href="/live/u 2">c</a></td><td>-</td></tr></table>') in listed
    live = pages.live("run </script>", "/api/live/</script>", 1500)
    assert "<title>run &lt;/script&gt; (in progress)</title>" in live
    assert 'var POLL_MS=1500, SOURCE="/api/live/\\u003c/script>";' in live
    assert '<span id="status" class="live">waiting for the first steps</span> <a id="done"></a>' in live
    assert '<div class="plot" id="live-loss" data-rows="0"></div>' in live


def _staged(lg: ledger.api.Ledger, uuid: str, trail: dict[str, Any], marks: list[tuple[int, float]]) -> None:
    """A wrapped launch in progress as its wrapper leaves it on disk: its facts, the live capture's trail of step
    lines (``live.json``) and the output's clock (16-byte marks: line count, Unix time)."""
    import struct

    run_dir = lg.store.staging / uuid
    run_dir.mkdir(parents=True)
    (run_dir / "wrapper.json").write_text(json.dumps({"name": "plain", "started_at": "2026-12-02T10:00:00+00:00",
                                                      "command": ["python", "train.py"]}))
    (run_dir / "live.json").write_text(json.dumps(trail))
    (run_dir / "output.clock").write_bytes(b"".join(struct.pack("<Qd", n, t) for n, t in marks))


def test_a_wrapped_launch_in_progress_is_drawn_from_its_printed_lines(empty: dict[str, Any]) -> None:
    lg, client = empty["lg"], empty["client"]
    uuid = "ab" * 16
    # step lines 3, 5, 7 of the log arrived at 1000, 1002, 1004 s: 2 s a step; 10 planned
    trail = {"fields": ["line", "step", "loss"], "recent": [[3, 1, 4.0], [5, 2, 2.0], [7, 3, 1.0]], "planned": 10}
    _staged(lg, uuid, trail, [(3, 1000.0), (5, 1002.0), (7, 1004.0)])
    assert f'<a href="/live/{uuid}">plain ({uuid[:8]})</a></td><td>2026-12-02T10:00:00+00:00</td>' in \
        client.get("/live").text
    state = client.get(f"/api/live/{uuid[:4]}").json()
    assert state["status"] == "step 3/10, loss 1.000, 0.5 steps/s, ETA 14 s"
    assert state["eta_s"] == 14.0 and state["rows"] == 3 and state["receipt"] is None
    figure = _arrays(state["figure"])
    assert figure["data"][0]["x"] == [0.0, 2.0, 4.0] and figure["data"][0]["y"] == [4.0, 2.0, 1.0]
    assert figure["layout"]["title"]["text"] == "training loss vs seconds since its first step line (live)"
    assert figure["layout"]["xaxis"]["title"]["text"] == "seconds since its first step line"


def test_a_wrapped_launch_without_a_clock_and_by_epoch(empty: dict[str, Any]) -> None:
    lg, client = empty["lg"], empty["client"]
    uuid = "cd" * 16
    trail = {"fields": ["line", "step", "loss", "epoch"], "recent": [[1, 1, 3.0, 0], [2, 2, 1.5, 1]]}
    _staged(lg, uuid, trail, [])  # no marks yet: the lines in the order printed
    state = client.get(f"/api/live/{uuid}").json()
    assert state["status"] == "epoch 1, step 2, loss 1.500, -, ETA (epoch) -"
    assert state["eta_s"] is None
    figure = _arrays(state["figure"])
    assert figure["data"][0]["x"] == [1.0, 2.0] and figure["data"][0]["y"] == [3.0, 1.5]
    assert figure["layout"]["xaxis"]["title"]["text"] == "step line"


def test_an_imported_log_without_times_is_drawn_against_its_steps(empty: dict[str, Any], tmp_path: Path) -> None:
    lg, client = empty["lg"], empty["client"]
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {s} | consumed tokens {100 * s} | loss {4.0 / s:.4f}\n" for s in range(1, 7)))
    rid = lg.ingest("log", log, name="imported").receipt.id
    page = client.get(f"/receipt/{rid[:8]}").text
    figs = _figures(page)
    assert set(figs) == {"curve-loss-tokens", "curve-loss-step"}  # the lines gave tokens, and no time
    assert figs["curve-loss-tokens"]["data"][0]["x"] == [100.0 * s for s in range(1, 7)]
    by_step = figs["curve-loss-step"]
    assert by_step["layout"]["title"]["text"] == "training loss vs step (the run logged no step times)"
    assert by_step["data"][0]["x"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert by_step["data"][0]["y"] == pytest.approx([round(4.0 / s, 4) for s in range(1, 7)])
    head = _table(page, "bookkeeping")
    assert (head["status"], head["started"], head["duration"], head["command"]) == ("imported", "None", "-", "")

"""The web view as a team's daily tool, in headless Chromium over a real server and a real ledger: the receipts
table with hyperparameter columns (chosen, filtered on, sorted by), overlays of any metric (custom, evals, system
telemetry) of 8 runs with one legend that covers nothing and smoothing, a failed run's error, notes and archived
runs, and a table that refreshes itself while a run is in progress. Screenshots go to $LEDGER_SCREENSHOTS when set
(else the test's temporary directory) and are checked for what they should show."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import textwrap
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromium import Browser, find_chromium
from conftest import BIN, child_env
from helpers import failed_receipt
from PIL import Image

import ledger
import ledger.sdk

pytestmark = pytest.mark.slow  # a ledger of 11 runs, a server and a browser

RUNS = 8
LRS = [1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3]
STEPS = 30
PALETTE = ("#1f5fa8", "#c8372d", "#2a9d4b", "#8e44ad", "#e8743b", "#17a2b8", "#b8860b", "#555555")
"""The web view's first eight run colours (plots.PALETTE), one per run in the order selected."""
HEADER = "#1f2d3d"
EVIL = "<b>boom</b>"
WRAPPED = """
import sys, time
pause = float(sys.argv[sys.argv.index("--pause") + 1]) if "--pause" in sys.argv else 0.0
for step in range(1, 16):
    time.sleep(pause)
    print(f"step {step} loss {6.0 / step:.4f}", flush=True)
"""


def loss(i: int, step: int) -> float:
    """Run i's logged loss at a step: curves that never coincide."""
    return (3.0 + 0.4 * i) / step + 0.05 * i


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    find_chromium()
    root = tmp_path_factory.mktemp("webruns")
    lg = ledger.open(root / "receipts")
    ids = []
    for i in range(RUNS):
        with lg.recording(name=f"lr-{LRS[i]:g}", tags={"sweep": "lr"}) as rec:
            run = ledger.sdk.current()
            run.set_workload({"model": {"num_experts": 8, "top_k": 2}, "optimizer": {"lr": LRS[i]},
                              "precision": {"compute": "bf16" if i % 2 else "fp32"}, "seed": 0})
            t0 = time.time()
            for step in range(1, STEPS + 1):
                run.log_step(step, loss=loss(i, step), tokens=512 * step, step_time_s=0.1, tokens_per_s=5120.0,
                             lr=LRS[i], **{"moe/load_cv": 0.1 * i + step / 100})
                run.log_telemetry("gpu0", utilization=0.5 + 0.05 * i, power_w=300.0 + 10 * i,
                                  memory_bytes=(20 + i) * 2**30, time_s=t0 + step)
                if step % 10 == 0:
                    run.log_eval(step, loss(i, step) + 0.1, metric="loss", split="val")
        assert rec.receipt is not None
        ids.append(rec.receipt.id)
    (root / "wrapped.py").write_text(textwrap.dedent(WRAPPED))
    env = child_env()
    for name, lr in (("wrapped", "3e-3"), ("mistyped", "3e3")):
        subprocess.run([str(BIN / "ledger"), "--ledger", str(lg.root), "record", "--name", name, "--", "python",
                        "wrapped.py", "--lr", lr], cwd=root, env=env, check=True, capture_output=True, timeout=120)
    lg.archive("mistyped", reason="mistyped --lr", author="alice")
    lg.note(ids[3], "ran on a degraded node", author="bob")
    failed = failed_receipt(lg.root, root, EVIL)
    server = subprocess.Popen([str(BIN / "ledger"), "--ledger", str(lg.root), "serve", "--port", "0", "--poll",
                               "0.3"], cwd=root, env=env, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", server.stderr.readline())
    assert match
    shots = Path(os.environ.get("LEDGER_SCREENSHOTS") or root / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    browser = Browser(root / "profile")
    try:
        yield {"root": root, "lg": lg, "ids": ids, "failed": failed, "base": f"http://127.0.0.1:{match.group(1)}",
               "b": browser, "shots": shots}
    finally:
        browser.close()
        server.terminate()
        server.wait(timeout=20)
        server.stderr.close()


def _pixels(png: bytes, colour: str, tolerance: int = 24) -> int:
    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return int((np.abs(rgb - target).max(axis=2) <= tolerance).sum())


def _shot(site: dict[str, Any], name: str) -> bytes:
    png: bytes = site["b"].screenshot()
    (site["shots"] / name).write_bytes(png)
    assert _pixels(png, HEADER) > 1280 * 25, f"{name}: no header bar"
    return png


def _plots_drawn(b: Browser, n: int) -> None:
    b.wait_for(f"Array.from(document.querySelectorAll('div.plot')).filter(function(d){{"
               f"return d.querySelector('.main-svg');}}).length>={n}")


def _names(b: Browser) -> list[str]:
    names: list[str] = b.evaluate("Array.from(document.querySelectorAll('#receipts tbody tr'))"
                                  ".map(function(tr){return tr.children[2].textContent;})")
    return names


def _header(b: Browser) -> list[str]:
    heads: list[str] = b.evaluate("Array.from(document.querySelectorAll('#receipts thead tr:first-child th a'))"
                                  ".map(function(a){return a.dataset.sort;})")
    return heads


def test_table_with_parameter_columns_chosen_filtered_and_sorted(site: dict[str, Any]) -> None:
    b, base = site["b"], site["base"]
    b.goto(f"{base}/")
    names = _names(b)
    assert "mistyped" not in names and "oom-run" in names and len(names) == RUNS + 2  # archived: hidden
    heads = _header(b)
    # without a choice: the built-in columns, then the hyperparameters that differ between the runs listed
    assert heads[:3] == ["name", "status", "started"]
    assert {"workload.optimizer.lr", "params.lr"} <= set(heads) and "workload.precision.compute" not in heads
    lr_cells = b.evaluate("(function(){var i=Array.from(document.querySelectorAll('#receipts thead tr:first-child "
                          "th')).findIndex(function(th){return th.title==='workload.optimizer.lr';});"
                          "return Array.from(document.querySelectorAll('#receipts tbody tr')).map(function(tr){"
                          "return tr.children[i].textContent;});})()")
    assert lr_cells[:RUNS] == [f"{x:.4g}" for x in LRS]
    _shot(site, "table-parameter-columns.png")

    # choose columns in the chooser: name, loss and the launch's --lr only
    b.evaluate("document.querySelector('details#columns').open=true;"
               "document.querySelectorAll('#chooser input[name=col]').forEach(function(c){c.checked="
               "['name','loss','params.lr'].indexOf(c.value)>=0;});")
    b.evaluate("document.getElementById('apply-columns').click()")
    b.wait_for("location.search.indexOf('col=')>=0 && document.readyState==='complete'")
    assert _header(b) == ["name", "loss", "params.lr"]

    # filter on a hyperparameter column (its box under the title) and sort by another
    b.goto(f"{base}/?" + urllib.parse.urlencode({"sort": "workload.optimizer.lr", "desc": "1"}))
    assert _names(b)[:3] == ["lr-0.005", "lr-0.003", "lr-0.002"]
    b.evaluate("document.querySelector('input.colfilter[data-key=\"workload.optimizer.lr\"]').value='<=3e-4'")
    b.evaluate("document.querySelector('#filter').submit()")
    b.wait_for("location.search.indexOf('f.workload.optimizer.lr')>=0 && document.readyState==='complete'")
    assert _names(b) == ["lr-0.0003", "lr-0.0002", "lr-0.0001"]  # still sorted, largest first

    # the where box takes the same keys; a typo is one line that names the choices
    b.goto(f"{base}/?" + urllib.parse.urlencode({"where": "param.lr=0.003 or loss>5"}))
    assert sorted(_names(b)) == ["wrapped"]
    b.goto(f"{base}/?" + urllib.parse.urlencode({"where": "param.lrr<1"}))
    assert "they have: param.lr" in b.evaluate("document.querySelector('.error').textContent")
    b.goto(f"{base}/?all=1")
    assert "mistyped" in _names(b)
    assert b.evaluate("document.querySelector('tr.archived').children[2].textContent") == "mistyped"
    assert not b.problems(), b.problems()


def test_overlay_of_8_runs_any_metric_one_legend_and_smoothing(site: dict[str, Any]) -> None:
    b, base, ids = site["b"], site["base"], site["ids"]
    query = urllib.parse.urlencode([("id", i[:8]) for i in ids])
    b.goto(f"{base}/overlay?{query}")
    _plots_drawn(b, 7)
    titles = b.evaluate("Array.from(document.querySelectorAll('div.plot')).map(function(d){"
                        "return d.layout.title.text;})")
    # loss, tokens/s, lr, step time; the eval series, the custom metric, the GPU's utilisation, power, memory
    for title in ("training loss vs tokens", "eval val/all/loss vs step", "moe/load_cv vs step",
                  "utilisation (0..1)", "power (W)", "memory (bytes)"):
        assert title in titles, titles
    info = b.evaluate("Array.from(document.querySelectorAll('div.plot')).map(function(d){return {legend:"
                      "d.layout.showlegend, legends:d.querySelectorAll('g.legend').length, n:d.data.length, colours:"
                      "d.data.map(function(t){return t.line.color;})};})")
    for plot in info:
        assert plot["legend"] is False and plot["legends"] == 0  # no Plotly legend over the axes
        assert plot["n"] == RUNS and plot["colours"] == list(PALETTE)
    legend = b.evaluate("Array.from(document.querySelectorAll('#runs li')).map(function(li){return "
                        "[li.textContent, getComputedStyle(li.querySelector('.swatch')).backgroundColor];})")
    assert [t.split(" (")[0] for t, _ in legend] == [f"lr-{x:g}" for x in LRS]
    rgb = [tuple(int(v) for v in re.findall(r"\d+", c)) for _, c in legend]
    assert rgb == [tuple(int(p[i:i + 2], 16) for i in (1, 3, 5)) for p in PALETTE]
    # every axis title clear: inside its plot, below the run list, overlapping nothing but its own plot
    boxes = b.evaluate("(function(){function r(e){var b=e.getBoundingClientRect();return [b.left,b.top,b.right,"
                       "b.bottom];}return {legend:r(document.getElementById('runs')),plots:Array.from("
                       "document.querySelectorAll('div.plot')).map(function(d){return {plot:r(d),x:r(d.querySelector("
                       "'.g-xtitle')),y:r(d.querySelector('.g-ytitle'))};})};})()")
    for p in boxes["plots"]:
        assert p["plot"][1] >= boxes["legend"][3]
        for title in (p["x"], p["y"]):
            assert p["plot"][0] <= title[0] and title[2] <= p["plot"][2] and p["plot"][1] <= title[1] \
                and title[3] <= p["plot"][3]
    png = _shot(site, "overlay-8-runs.png")
    for colour in PALETTE:
        assert _pixels(png, colour) > 150, colour  # each run's line (and its swatch) is drawn

    # smoothing: the page's exponential moving average, TensorBoard's debiasing, on the logged values
    b.evaluate("var s=document.getElementById('smooth');s.value='0.6';s.dispatchEvent(new Event('input'))")
    smoothed = b.wait_for("document.getElementById('smooth-value').textContent==='0.6'?"
                          "Array.from(document.querySelector('div.plot').data[2].y):null")
    raw = [loss(2, s) for s in range(1, STEPS + 1)]
    expected, last = [], 0.0
    for n, y in enumerate(raw, start=1):
        last = 0.6 * last + 0.4 * y
        expected.append(last / (1 - 0.6 ** n))
    assert smoothed == pytest.approx(expected, rel=1e-9)
    assert smoothed != pytest.approx(raw)
    # hiding a run in the legend hides it in every plot
    b.evaluate(f"document.querySelector('#runs .toggle[data-run=\"{ids[0]}\"]').click()")
    hidden = b.evaluate("Array.from(document.querySelectorAll('div.plot')).map(function(d){return d.data[0].visible;})")
    assert set(hidden) == {False}

    # one chosen metric against time; a metric no run has is refused with the ones they have
    b.goto(f"{base}/overlay?{query}&m=telemetry:power_w&m=loss&x=time")
    _plots_drawn(b, 2)
    assert b.evaluate("Array.from(document.querySelectorAll('div.plot')).map(function(d){return d.layout.title.text"
                      ";})") == ["power (W)", "training loss vs seconds"]
    assert not b.problems(), b.problems()
    b.goto(f"{base}/overlay?{query}&m=nope")  # a 400 page
    assert "no run selected has the metric(s) 'nope'" in b.evaluate("document.querySelector('.error').textContent")
    b.events.clear()


def test_overlay_of_a_wrapped_run_with_an_sdk_run(site: dict[str, Any]) -> None:
    """A run that only printed lines has no tokens: its loss is drawn against steps with the SDK run's, and the
    title says why."""
    b, base, ids = site["b"], site["base"], site["ids"]
    b.goto(f"{base}/overlay?id=wrapped&id={ids[0][:8]}")
    _plots_drawn(b, 1)
    first = b.evaluate("(function(){var d=document.querySelector('div.plot');return [d.layout.title.text, "
                       "d.data.map(function(t){return t.x.bdata?atob(t.x.bdata).length/8:t.x.length;})];})()")
    assert first[0].startswith("training loss vs step (no tokens for wrapped (") and first[1] == [15, STEPS]


def test_a_failed_run_shows_its_error_and_notes_are_shown(site: dict[str, Any]) -> None:
    b, base = site["b"], site["base"]
    b.goto(f"{base}/receipt/{site['failed'][:8]}")
    text = b.evaluate("document.getElementById('failure').textContent")
    assert f"failed: RuntimeError: CUDA out of memory {EVIL} (exit code 1)" in text
    assert "loss.backward()" in text and "(from output.log, line 3)" in text
    assert b.evaluate("document.querySelectorAll('#failure b').length") == 0  # user text, escaped
    png = _shot(site, "failed-run.png")
    assert _pixels(png, "#fdecea", 4) > 2000 and _pixels(png, "#fdf3f2", 4) > 5000  # the error line and its lines
    b.goto(f"{base}/receipt/{site['ids'][3][:8]}")
    assert "bob: ran on a degraded node" in b.evaluate("document.getElementById('notes').textContent")
    assert b.evaluate("document.querySelectorAll('#failure').length") == 0  # a run that succeeded says nothing
    assert not b.problems(), b.problems()


def test_the_table_refreshes_itself_while_a_run_is_in_progress(site: dict[str, Any]) -> None:
    b, base, root, lg = site["b"], site["base"], site["root"], site["lg"]
    run = subprocess.Popen([str(BIN / "ledger"), "--ledger", str(lg.root), "record", "--name", "slow", "--",
                            "python", "wrapped.py", "--pause", "0.2", "--lr", "1e-3"], cwd=root, env=child_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list((lg.root / ".staging").glob("*/wrapper.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        b.goto(f"{base}/")
        b.evaluate("window.__marker=1")
        assert b.evaluate("document.querySelectorAll('#running tbody tr').length") == 1
        assert "slow" not in _names(b)
        b.wait_for("document.querySelectorAll('#running tbody tr').length===0 && "
                   "Array.from(document.querySelectorAll('#receipts tbody tr')).some(function(tr){"
                   "return tr.children[2].textContent==='slow';})", timeout=120)
        assert b.evaluate("window.__marker") == 1 and b.evaluate("window.__refreshed") >= 1  # no reload
        assert run.wait(timeout=60) == 0
        published = json.loads(subprocess.run([str(BIN / "ledger"), "--ledger", str(lg.root), "ls", "--json",
                                               "--where", "name=slow"], env=child_env(), check=True,
                                              capture_output=True, text=True).stdout)
        assert b.evaluate(f"document.querySelectorAll('#receipts tr[data-id=\"{published[0]['id']}\"]').length") == 1
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()

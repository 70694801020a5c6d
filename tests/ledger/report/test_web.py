"""`ledger serve` for real: a uvicorn server on a free 127.0.0.1 port over a ledger of real `ledger record`
runs, read by headless Chromium over the DevTools protocol. Every page renders (rows and plots in the DOM,
a screenshot that is not blank, no console errors, no request leaving 127.0.0.1), a filter narrows the
table, a column sorts it, two ticked runs open their comparison, user text is escaped, and a run in
progress shows up with its curve growing until it is published."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from chromium import Browser, find_chromium
from conftest import BIN, child_env
from PIL import Image

pytestmark = pytest.mark.slow  # real runs, a server and a browser: about 30 s for the module on a quiet machine

EVIL = '<img src=x onerror="window.__pwned=1">'
STEPS = {"alpha": 10, "beta": 20, EVIL: 30}
"""Run name -> steps; the final loss of a run of n steps is 4/n (the script below)."""

SCRIPT = """
import sys, time
import ledger.sdk
run = ledger.sdk.current()
steps, pause = int(sys.argv[1]), float(sys.argv[2])
run.set_workload({"seed": 7, "precision": {"compute": "fp32"}, "model": {"num_experts": 4, "top_k": 2},
                  "batch": {"steps": steps}})
for step in range(1, steps + 1):
    time.sleep(pause)
    run.log_step(step, loss=4.0 / step, tokens=step * 256, step_time_s=0.01, tokens_per_s=25600.0, lr=1e-3)
    run.log_routing(step, 0, [100, 156, 128, 128], dropped=[0, 6, 0, 0], entropy=0.9)
    run.log_timing(step, "expert", 0.004)
    run.log_timing(step, "all_to_all", 0.002)
    if step % 5 == 0:
        run.log_eval(step, 4.5 / step, metric="loss", split="val", source="rare")
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    find_chromium()
    root = tmp_path_factory.mktemp("web")
    (root / "train.py").write_text(textwrap.dedent(SCRIPT))
    ledger = root / "receipts"
    env = child_env()
    for name, steps in STEPS.items():
        subprocess.run([str(BIN / "ledger"), "--ledger", str(ledger), "record", "--name", name, "--", "python",
                        "train.py", str(steps), "0"], cwd=root, env=env, check=True, capture_output=True, timeout=120)
    rows = json.loads(subprocess.run([str(BIN / "ledger"), "--ledger", str(ledger), "ls", "--json"], env=env,
                                     check=True, capture_output=True, text=True).stdout)
    server = subprocess.Popen([str(BIN / "ledger"), "--ledger", str(ledger), "serve", "--port", "0", "--poll", "0.3"],
                              cwd=root, env=env, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    line = server.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    assert match, line
    base = f"http://127.0.0.1:{match.group(1)}"
    browser = Browser(root / "profile")
    try:
        yield {"root": root, "ledger": ledger, "rows": {r["name"]: r for r in rows}, "base": base,
               "browser": browser}
    finally:
        browser.close()
        server.terminate()
        server.wait(timeout=20)
        server.stderr.close()


HEADER = "#1f2d3d"
"""The page header's background (pages.CSS)."""
LINES = ("#1f5fa8", "#c8372d", "#2a9d4b")
"""The first three line colours of the web view (plots.PALETTE): one per run, in order."""


def _pixels(png: bytes, colour: str, tolerance: int = 24) -> int:
    """Pixels of a screenshot within ``tolerance`` (each channel) of ``colour``."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return int((np.abs(rgb - target).max(axis=2) <= tolerance).sum())


def _looks_like(png: bytes, lines: tuple[str, ...], page: str, only: bool = True) -> None:
    """The screenshot shows the header bar (1280 px wide, about 35 high) and a drawn line of each colour
    (``only``: and no line of the other run colours). A colour counts from 100 pixels: in the overlay the
    three runs' curves coincide (one configuration), the last run's line covers the others, and the first two
    colours show in the run list's swatches alone (24 x 8 pixels each: the overlay has one legend above its plots,
    not one per plot). That the overlay has three traces is asserted on the page's data."""
    assert _pixels(png, HEADER) > 1280 * 25, f"the {page} page has no header bar"
    for colour in lines:
        assert _pixels(png, colour) > 100, f"the {page} page draws no {colour} line"
    for colour in set(LINES) - set(lines) if only else ():
        assert _pixels(png, colour) < 20, f"the {page} page draws a {colour} line it should not"


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def _plots(b: Browser, at_least: int) -> int:
    n: int = b.wait_for(f"(function(){{var n=Array.from(document.querySelectorAll('div.plot')).filter("
                        f"function(d){{return d.querySelector('.main-svg');}}).length;return n>={at_least}?n:0;}})()")
    return n


def _rows(b: Browser) -> list[str]:
    names: list[str] = b.evaluate("Array.from(document.querySelectorAll('#receipts tbody tr'))"
                                  ".map(function(tr){return tr.children[2].textContent;})")
    return names


def test_every_page_renders(site: dict[str, object]) -> None:
    b, base, rows, ledger = site["browser"], site["base"], site["rows"], site["ledger"]
    assert isinstance(b, Browser) and isinstance(rows, dict) and isinstance(ledger, Path)
    before = _files(ledger)
    ids = [rows[n]["id"] for n in STEPS]

    b.goto(f"{base}/")
    assert sorted(_rows(b)) == sorted(STEPS)
    assert b.evaluate("document.querySelectorAll('#receipts tbody code')[0].textContent") == ids[0][:8]
    shots = {"table": b.screenshot()}

    b.goto(f"{base}/receipt/{ids[1][:8]}")
    # loss vs tokens and vs time, tokens/s, lr, step time, evals, timing per phase, the routing heatmap
    assert _plots(b, 8) == 8
    assert b.evaluate("document.querySelectorAll('#goodput svg').length") == 1
    factors = b.evaluate("Array.from(document.querySelectorAll('.factors h3')).map(function(h){"
                         "return h.textContent;})")
    assert {"precision", "task", "seed"} <= set(factors)
    assert b.evaluate("document.querySelector('#bookkeeping').textContent").count(ids[1]) == 1
    shots["receipt"] = b.screenshot()

    b.goto(f"{base}/overlay?" + "&".join(f"id={i[:8]}" for i in ids))
    n = _plots(b, 5)
    assert n >= 5
    traces = b.evaluate("document.querySelector('.plot').data.map(function(t){return t.name;})")
    assert len(traces) == 3  # one line per run, on shared axes
    shots["overlay"] = b.screenshot()

    b.goto(f"{base}/live")
    assert "No run in progress" in b.evaluate("document.body.textContent")

    # what each screenshot should show: the table no plot line; the receipt its run's curves (first colour);
    # the overlay three runs, one colour each
    _looks_like(shots["table"], (), "table")
    _looks_like(shots["receipt"], LINES[:1], "receipt")
    _looks_like(shots["overlay"], LINES, "overlay")
    assert not b.problems(), b.problems()
    outside = [u for u in b.requested() if not u.startswith((f"{base}/", "about:", "data:"))]
    assert not outside, outside
    assert _files(ledger) == before  # read-only: browsing every page wrote nothing in the ledger


def test_filter_sort_select_and_compare(site: dict[str, object]) -> None:
    b, base, rows = site["browser"], site["base"], site["rows"]
    assert isinstance(b, Browser) and isinstance(rows, dict)
    b.goto(f"{base}/")
    b.evaluate("document.querySelector('#filter input[name=where]').value='summary.steps>=20'")
    b.evaluate("document.querySelector('#filter').submit()")
    b.wait_for("location.search.indexOf('where=')>=0 && document.readyState==='complete'")
    assert sorted(_rows(b)) == sorted(n for n, s in STEPS.items() if s >= 20)

    b.goto(f"{base}/")
    b.evaluate("document.querySelector('th a[data-sort=loss]').click()")
    b.wait_for("location.search.indexOf('sort=loss')>=0 && document.readyState==='complete'")
    assert _rows(b) == sorted(STEPS, key=lambda n: 4.0 / STEPS[n])  # final loss 4/steps, smallest first

    b.goto(f"{base}/?where=bogus.field%3D1")
    assert "unknown field 'bogus.field'" in b.evaluate("document.querySelector('.error').textContent")

    b.goto(f"{base}/")
    for name in ("alpha", "beta"):
        b.evaluate(f"document.querySelector('tr[data-id=\"{rows[name]['id']}\"] input').click()")
    b.evaluate("document.getElementById('compare').click()")
    b.wait_for("location.pathname==='/compare' && document.readyState==='complete'")
    assert b.evaluate("document.title") == "ledger compare: alpha vs beta"
    assert b.evaluate("document.querySelectorAll('svg').length") >= 5
    assert "training loss vs tokens" in b.evaluate("document.body.textContent")
    shot = b.screenshot()  # the report's A (blue) and B (red) curves; html.A_COLORS[0], html.B_COLORS[0]
    assert _pixels(shot, "#1f5fa8") > 150 and _pixels(shot, "#c8372d") > 150


def test_user_text_is_escaped(site: dict[str, object]) -> None:
    b, base, rows = site["browser"], site["base"], site["rows"]
    assert isinstance(b, Browser) and isinstance(rows, dict)
    evil = rows[EVIL]["id"]
    for url in (f"{base}/", f"{base}/receipt/{evil}", f"{base}/overlay?id={evil}"):
        b.goto(url)
        time.sleep(0.3)
        assert b.evaluate("document.querySelectorAll('main img').length") == 0
        assert EVIL in b.evaluate("document.body.textContent") or url.endswith(f"id={evil}")
    assert b.evaluate("window.__pwned") is None
    html = urllib.request.urlopen(f"{base}/receipt/{evil}", timeout=30).read().decode()
    assert EVIL not in html and "&lt;img src=x" in html


def test_a_run_in_progress_updates_until_published(site: dict[str, object]) -> None:
    b, base, root, ledger = site["browser"], site["base"], site["root"], site["ledger"]
    assert isinstance(b, Browser) and isinstance(root, Path) and isinstance(ledger, Path)
    run = subprocess.Popen([str(BIN / "ledger"), "--ledger", str(ledger), "record", "--name", "slow", "--",
                            "python", "train.py", "40", "0.15"], cwd=root, env=child_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list((ledger / ".staging").glob("*/wrapper.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        b.goto(f"{base}/")
        assert "1 run(s) in progress" in b.evaluate("document.body.textContent")
        b.goto(f"{base}/live")
        b.evaluate("document.querySelector('#live a').click()")
        b.wait_for("location.pathname.indexOf('/live/')===0 && document.readyState==='complete'")
        first = int(b.wait_for("+document.getElementById('live-loss').dataset.rows"))
        later = int(b.wait_for(f"(function(){{var n=+document.getElementById('live-loss').dataset.rows;"
                               f"return n>{first}?n:0;}})()"))
        assert later > first >= 1
        assert b.evaluate("document.querySelectorAll('#live-loss .main-svg').length") >= 1
        _looks_like(b.screenshot(), LINES[:1], "live", only=False)  # its status line is red text
        href = b.wait_for("document.getElementById('done').getAttribute('href')", timeout=90)
        assert run.wait(timeout=60) == 0
        rows = json.loads(subprocess.run([str(BIN / "ledger"), "--ledger", str(ledger), "ls", "--json", "--where",
                                          "name=slow"], env=child_env(), check=True, capture_output=True,
                                         text=True).stdout)
        assert href == f"/receipt/{rows[0]['id']}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_a_wrapped_launch_in_progress_is_drawn_from_its_printed_lines(site: dict[str, object]) -> None:
    """A loop without the SDK (`step N | loss X` lines, 0.15 s apart): its live page draws the loss against the
    seconds since its first line (it prints no tokens), the status line gives steps/s from when the lines arrived,
    and the drawn rows grow while it runs."""
    b, base, root, ledger = site["browser"], site["base"], site["root"], site["ledger"]
    assert isinstance(b, Browser) and isinstance(root, Path) and isinstance(ledger, Path)
    (root / "plain.py").write_text("import time\nfor i in range(1, 41):\n    time.sleep(0.15)\n"
                                   "    print(f'step {i} | loss {4.0 / i:.4f} | lr 0.001', flush=True)\n")
    run = subprocess.Popen([str(BIN / "ledger"), "--ledger", str(ledger), "record", "--name", "plain", "--",
                            "python", "plain.py"], cwd=root, env=child_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        uuid = None
        while uuid is None and time.monotonic() < deadline:
            found = [p.parent.name for p in (ledger / ".staging").glob("*/wrapper.json")
                     if '"plain"' in p.read_text()]
            uuid = found[0] if found else None
            time.sleep(0.1)
        assert uuid is not None
        b.goto(f"{base}/live/{uuid}")
        first = int(b.wait_for("+document.getElementById('live-loss').dataset.rows"))
        later = int(b.wait_for(f"(function(){{var n=+document.getElementById('live-loss').dataset.rows;"
                               f"return n>{first}?n:0;}})()"))
        assert later > first >= 1
        state = json.loads(urllib.request.urlopen(f"{base}/api/live/{uuid}", timeout=30).read())
        assert re.search(r"step \d+, loss \d\.\d+, [\d.]+ steps/s", state["status"]), state["status"]
        rate = float(re.search(r"([\d.]+) steps/s", state["status"]).group(1))  # type: ignore[union-attr]
        assert 3 <= rate <= 9, state["status"]  # a line every 0.15 s: about 6.7 steps/s
        figure = state["figure"]
        assert "seconds since its first step line" in json.dumps(figure["layout"])
        x = figure["data"][0]["x"]  # Plotly's typed array: float64 bytes, base64
        xs = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]) if isinstance(x, dict) else np.array(x)
        assert xs[0] == 0 and (np.diff(xs) > 0).all() and xs[-1] < 30, xs
        assert run.wait(timeout=60) == 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()

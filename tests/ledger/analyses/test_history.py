"""`ledger history`: E-divisive means against a brute-force statistic, calibration on simulated histories (false
change points, power and placement), and end to end on a ledger whose last runs are 10% slower after a commit
changed (issue 35's case), through the CLI and the web page.

Simulated runs (:mod:`calibration`): step times from an AR(1) process around a per-run offset. The between-run
SD is 4% in the calibration of power, the noise issue 35's own 20-run history implies (0.904 [0.866, 0.942] from
10 vs 10 runs: a standard error of 1.8%); at 5% a 10% shift is still found (95%) but placed within one run of the
truth only 80% of the time (bench_history prints it), which the Gaussian least-squares split does not much better.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import calibration as cal
import numpy as np
import pytest

from ledger.analyses.changepoints import best_split, e_divisive
from ledger.analyses.history import SPEED, analyse, per_run_metric
from ledger.errors import BadInput


def _binomial_upper(n: int, p: float) -> float:
    from scipy import stats

    return float(stats.binom.ppf(0.99, n, p)) / n


def _history(rng: np.random.Generator, n: int = 30, shift_at: int | None = None, slower: float = 0.9,
             sd: float = 0.04, steps: int = 40) -> list[Any]:
    """``n`` runs of one configuration, those from ``shift_at`` on ``slower`` times the speed."""
    return [cal.run_data(cal.series(rng, "a", k, slower if shift_at is not None and k >= shift_at else 1.0,
                                    steps=steps, between_sd=sd)) for k in range(n)]


# ------------------------------------------------------------------------------------------ E-divisive
def _q_by_hand(x: list[float], start: int, tau: int, kappa: int) -> float:
    """Matteson and James's divergence of x[start:tau] and x[tau:kappa], with explicit loops."""
    a, b = x[start:tau], x[tau:kappa]
    m, n = len(a), len(b)
    between = sum(abs(u - v) for u in a for v in b)
    wa = sum(abs(u - v) for u, v in itertools.combinations(a, 2))
    wb = sum(abs(u - v) for u, v in itertools.combinations(b, 2))
    e = 2 * between / (m * n) - wa / (m * (m - 1) / 2) - wb / (n * (n - 1) / 2)
    return m * n / (m + n) * e


def test_the_best_split_maximises_the_divergence_over_every_split_and_end() -> None:
    from ledger.analyses.changepoints import _prefix

    rng = np.random.default_rng(0)
    x = list(rng.normal(size=9)) + list(rng.normal(2.0, 1.0, size=7))
    p = _prefix(np.asarray(x))
    brute = max((_q_by_hand(x, 3, t, k), t) for t in range(5, 15) for k in range(t + 2, 17))
    got = best_split(p, 3, 16)
    assert got is not None and got[0] == brute[1] and got[1] == pytest.approx(brute[0], rel=1e-12)
    assert best_split(p, 0, 3) is None  # two values on each side need four


def test_planted_shifts_are_found_and_flat_series_give_none() -> None:
    assert [s.index for s in e_divisive([0.0] * 8 + [1.0] * 8)] == [8]
    two = e_divisive([0.0] * 10 + [1.0] * 10 + [3.0] * 10)
    assert [s.index for s in two] == [10, 20] and all(s.p_value <= 0.05 for s in two)
    assert e_divisive([1.0] * 20) == [] and e_divisive([1.0, 2.0, 3.0]) == []
    with pytest.raises(ValueError, match="finite"):
        e_divisive([1.0, float("nan"), 2.0, 3.0, 4.0])


# ------------------------------------------------------------------------------------------ calibration
def test_stationary_histories_get_a_false_change_point_at_most_alpha_of_the_time() -> None:
    rng = np.random.default_rng(3035)
    metric = per_run_metric(SPEED, [])
    n = 300
    false = sum(bool(analyse(_history(rng), metric, seed=i).change_points) for i in range(n))
    assert false / n <= _binomial_upper(n, 0.05), false / n


def test_a_10_percent_shift_after_10_runs_is_found_within_one_run() -> None:
    """At a 4% between-run SD and 120 steps a run (the runs' own noise adds to it), E-divisive places the change
    within one run of the truth in 94.8% of 400 histories measured apart from this test; 90% is the issue's
    floor, and 200 histories put the binomial 99% error below it."""
    rng = np.random.default_rng(1035)
    metric = per_run_metric(SPEED, [])
    n, near, sizes = 200, 0, []
    for i in range(n):
        got = analyse(_history(rng, shift_at=10, steps=120), metric, seed=i)
        hits = [c for c in got.change_points if abs(c.index - 10) <= 1]
        near += bool(hits)
        if hits:
            sizes.append(hits[0].ratio)
    assert near / n >= 0.90, near / n
    assert abs(float(np.median(sizes)) - 0.9) < 0.02  # the shift's size: the planted 10% slowdown


# ------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def ledger_with_a_regression(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twenty runs of one configuration, one a minute; from the 11th on, 10% slower and at another commit. Runs
    9 and 10 ran on another host (a change that does not line up with the shift). Plus three runs of another
    configuration (too few to search). Tags split them into halves."""
    root = tmp_path_factory.mktemp("history") / "receipts"
    rng = np.random.default_rng(2020)
    for k in range(20):
        late = k >= 10
        cal.publish_run(root, cal.series(rng, "a", k, 0.9 if late else 1.0, steps=60, between_sd=0.04),
                        name=f"nightly-{k + 1:02d}", commit="b" * 40 if late else "a" * 40,
                        hostname="node-2" if k in (8, 9) else "node-1")
    for k in range(3):
        cal.publish_run(root, cal.series(rng, "other", k, steps=60), name=f"other-{k}")
    return root


def test_history_finds_the_regression_and_names_the_commit(ledger_with_a_regression: Path) -> None:
    from ledger.analyses.history import history
    from ledger.store import index
    from ledger.store.receipts import Ledger

    with index.reader(Ledger(ledger_with_a_regression)) as con:
        found = history(con)
    (series,) = found.series
    assert [label for label, _, _ in found.skipped] and found.skipped[0][1] == 3  # the other configuration
    (cp,) = series.change_points
    assert cp.first.name == "nightly-11" and cp.last_before.name == "nightly-10"
    assert cp.ratio is not None and cp.ci is not None and cp.ci[0] < cp.ratio < cp.ci[1] < 1.0
    assert 0.85 < cp.ratio < 0.95
    commit = next(s for s in cp.suspects if s.path == "stack.code.commit")
    assert commit.factor == "code" and commit.consistent and (commit.before, commit.after) == ("a" * 40, "b" * 40)
    node = next(s for s in cp.suspects if s.path == "stack.hardware.hostname")
    assert node.factor == "node" and not node.consistent  # node-2 ran two runs before the shift, then node-1
    assert cp.suspects[0] is commit  # the consistent change first
    with index.reader(Ledger(ledger_with_a_regression)) as con:
        with pytest.raises(BadInput, match="compares two sides at shared points"):
            history(con, metric="loss @ matched tokens")
        with pytest.raises(BadInput, match="no completed run matches"):
            history(con, where="name=nothing")
        where = history(con, where="name~nightly-*", metric="step time (median)")
    assert [c.first.name for c in where.change_points[0][0].change_points] == ["nightly-11"]
    assert where.change_points[0][1].ratio is not None and where.change_points[0][1].ratio > 1.05  # slower: longer


def test_compare_of_the_two_halves_of_one_configuration_tests_them(tmp_path: Path) -> None:
    """Issue 35: twenty runs of one configuration, the last ten 10% slower: `compare` of the two halves said
    "replicates of one configuration, and every difference below is run-to-run noise", without a test. They
    are tested now, and the slowdown is a finding."""
    from ledger.analyses.compare import CompareOptions, Ref, compare
    from ledger.store import index
    from ledger.store.receipts import Ledger

    rng = np.random.default_rng(2021)
    for k in range(20):
        cal.publish_run(tmp_path, cal.series(rng, "a", k, 0.9 if k >= 10 else 1.0, steps=60, between_sd=0.04),
                        name=f"run-{k}", tags={"half": "2" if k >= 10 else "1"})
    with index.reader(Ledger(tmp_path)) as con:
        c = compare(con, Ref(group="half=1"), Ref(group="half=2"), CompareOptions(plugins=False, attribution=False))
    assert c.same_config
    row = next(r for r in c.metrics if r.name == SPEED)
    assert row.n == (10, 10) and row.verdict == "worse" and row.ci is not None and row.ci[1] < 1.0
    assert row.rule is not None and row.rule.startswith("p = ")
    assert any(n.startswith("finding: A and B are one configuration and differ in tokens/s per device")
               for n in c.notes)
    assert not any("every difference below is run-to-run noise" in n for n in c.notes)


@pytest.mark.slow
def test_the_command_and_the_page(ledger_with_a_regression: Path) -> None:
    import subprocess

    from conftest import BIN, child_env

    env = child_env(LEDGER_DIR=str(ledger_with_a_regression))
    out = subprocess.run([str(BIN / "ledger"), "history", "--json"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    (cp,) = data["change_points"]
    assert cp["name"] == "nightly-11" and len(cp["id"]) == 64 and cp["ratio"] < 1
    assert data["series"][0]["runs"][10]["name"] == "nightly-11"
    text = subprocess.run([str(BIN / "ledger"), "history"], env=env, capture_output=True, text=True, timeout=300)
    assert "first run after: nightly-11" in text.stdout and "suspect code: stack.code.commit" in text.stdout
    bad = subprocess.run([str(BIN / "ledger"), "history", "--metric", "nope"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("Error: no metric 'nope'; --metric takes a per-run metric")

    from ledger.report.web.history import history_page
    from ledger.store.receipts import Ledger

    html = history_page(Ledger(ledger_with_a_regression), "", "")
    assert html.count('class="change-point"') == 1 and "nightly-11" in html
    assert '"type":"line"' in html.replace(" ", "")  # the change point's dashed line in the figure
    evil = history_page(Ledger(ledger_with_a_regression), "name=<script>", "")
    assert "<script>" not in evil.split("<main>")[1].split("</main>")[0].replace("<script type", "")

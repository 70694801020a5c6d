"""`ledger ab A B --until-verdict` in this process (ledger.replay.until_verdict.run_ab): real launches recorded
through `record()`, each printing a speed the test knows (a counter file gives each launch the next factor of a
fixed list), judged round by round. Checks the rounds recorded and their tags, the progress lines, the result's
names, the noise `compare` measures before the rounds (none for single runs; after the rounds the pooled SD of
the replicates' log speeds, by numpy), and a failed launch that stops the sequence."""

from __future__ import annotations

import io
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from ledger.analyses.power import runs_for_power
from ledger.errors import LedgerError
from ledger.record.wrapper import RecordOptions, record
from ledger.replay.until_verdict import Options, measured_noise, run_ab
from ledger.store.receipts import Ledger
from schemas import Receipt

SCRIPT = """
import argparse, pathlib, sys
p = argparse.ArgumentParser()
p.add_argument("--tps", type=float)
p.add_argument("--count")
a = p.parse_args()
path = pathlib.Path(a.count)
n = int(path.read_text()) if path.exists() else 0
path.write_text(str(n + 1))
if (path.parent / "fail").exists():
    sys.exit(3)
tps = a.tps * (1.0, 1.02, 0.97, 1.01, 0.99, 1.03)[n % 6]
for step in range(1, 13):
    print(f"step={step} loss={3.0 + 1.0 / step:.4f} tokens={step * 1000} tokens_per_s={tps:.1f}", flush=True)
"""


def test_rounds_are_recorded_judged_and_reported(tmp_path: Path) -> None:
    script, count = tmp_path / "train.py", tmp_path / "count"
    script.write_text(SCRIPT)
    ledger = Ledger(tmp_path / "receipts")

    def launch(name: str | None, tps: str, replicates: str | None = None) -> Receipt:
        result = record(ledger, RecordOptions(command=[sys.executable, str(script), "--tps", tps, "--count",
                                                       str(count)], name=name, stdout=io.BytesIO(),
                                              stderr=io.BytesIO(), replicates=replicates))
        assert result.exit_code == 0 and result.receipt is not None
        return result.receipt

    # launches 0 and 1: factors 1.0 and 1.02; B has no name: it is called by its short id
    a, b = launch("slow", "1000"), launch(None, "2000")
    fast = b.id[:12]
    assert measured_noise(ledger, a, b) == (None, 0)  # one run a side, no floor: nothing measured
    lines: list[str] = []
    out = io.BytesIO()
    result = run_ab(ledger, a, b, Options(max_rounds=2), stdout=out, progress=lines.append)
    assert (result.rounds, result.stopped, result.verdict, result.names) == (2, "cap", "inconclusive",
                                                                            ("slow", fast))
    assert result.noise_sd is None and result.cap_from == "--max-rounds"  # nothing measured before
    assert b"step=12" in out.getvalue()  # the launches' output went where it was sent
    speeds = {"A": [1000 * f for f in (0.97, 0.99)], "B": [2000 * f for f in (1.01, 1.03)]}  # launches 2-5
    speed = result.speed()
    assert speed.a == pytest.approx(speeds["A"]) and speed.b == pytest.approx(speeds["B"])
    assert lines[0] == ("round 1: tokens/s per device inconclusive (no test before 2 rounds); loss @ matched tokens "
                        "identical (equal values in every round)")
    assert speed.ratio is not None and speed.interval is not None and speed.p_value is not None
    assert lines[1] == (f"round 2: tokens/s per device B/A {speed.ratio:.3f}x, 96% confidence sequence (unbounded "
                        f"yet), p {speed.p_value:.2g}: undecided; loss @ matched tokens identical (equal values in "
                        "every round)")
    assert len(lines) == 2
    recorded = {ledger.load(i).name: ledger.load(i) for i in ledger.ids()}
    experiment = recorded[next(n for n in recorded if n and n.startswith("slow-ab"))].tags["ab"]
    for k in (1, 2):
        for side, base, original in (("A", "slow", a), ("B", fast, b)):
            r = recorded[f"{base}-ab{experiment}-{k}"]
            assert r.tags == {"ab": experiment, "ab_side": side} and r.links.replicates == original.id
    assert [list(pair) for pair in result.runs] == [[recorded[f"slow-ab{experiment}-{k}"].id,
                                                     recorded[f"{fast}-ab{experiment}-{k}"].id] for k in (1, 2)]
    # now each side has three runs: compare's pooled SD of the log speeds, with no floor beyond them
    logs_a, logs_b = np.log([1000.0, 970.0, 990.0]), np.log([2040.0, 2020.0, 2060.0])
    pooled = math.sqrt((((logs_a - logs_a.mean()) ** 2).sum() + ((logs_b - logs_b.mean()) ** 2).sum()) / 4)
    sd, prior = measured_noise(ledger, a, b)
    assert sd == pytest.approx(pooled, rel=1e-9) and prior == 0
    # a fourth run of A (launch 6: factor 1.0): 4 against 3, still no floor beyond the sides' own 5 degrees
    launch("slow-again", "1000", replicates=a.id)
    logs_a = np.log([1000.0, 970.0, 990.0, 1000.0])
    pooled = math.sqrt((((logs_a - logs_a.mean()) ** 2).sum() + ((logs_b - logs_b.mean()) ** 2).sum()) / 5)
    sd, prior = measured_noise(ledger, a, b)
    assert sd == pytest.approx(pooled, rel=1e-9) and prior == 0
    # measured before the rounds, that noise sizes the fixed design (and the cap, were none given)
    again = run_ab(ledger, a, b, Options(max_rounds=2), stdout=io.BytesIO())
    assert again.noise_sd == pytest.approx(pooled, rel=1e-9)
    assert again.fixed_rounds == runs_for_power(again.noise_sd, 0.05, 0.04)
    # a launch that fails stops the sequence, saying after how many complete rounds
    (tmp_path / "fail").write_text("")
    with pytest.raises(LedgerError) as caught:
        run_ab(ledger, a, b, Options(max_rounds=2, noise_sd=0.01), stdout=io.BytesIO())
    assert re.fullmatch(r"round 1: slow-ab[0-9a-f]{8}-1 failed \(exit 3\); the sequence stops after 0 complete "
                        r"round\(s\)", str(caught.value)), str(caught.value)

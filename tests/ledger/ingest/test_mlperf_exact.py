"""MLPerf's quality target at its exact edges: an eval exactly at the target meets it (both directions), and
the newest of several matching rule sets is the one used (issue 23's planted bugs)."""

from __future__ import annotations

from pathlib import Path

from ledger.ingest.mlperf import find_rules, gate_met, quality_target
from schemas.receipt import QualityGate

RULE = """- KEY:
    NAME: eval_accuracy
    REQ: AT_LEAST_ONE
    ATLEAST_ONE_CHECK: "v['value'] {op} {x}"
"""


def test_an_eval_exactly_at_the_target_meets_it_in_both_directions() -> None:
    low = QualityGate(name="ppl", metric="eval_accuracy", threshold=3.3, direction="min")
    high = QualityGate(name="acc", metric="eval_accuracy", threshold=0.72, direction="max")
    assert gate_met(low, [(100, 3.4), (200, 3.3), (300, 3.2)]) == 200
    assert gate_met(low, [(100, 3.4), (200, 3.3000001)]) is None
    assert gate_met(high, [(100, 0.71), (200, 0.72), (300, 0.73)]) == 200
    assert gate_met(high, [(100, 0.7199999)]) is None
    assert gate_met(high, [(100, float("nan")), (200, 0.8)]) == 200  # a NaN eval never meets a target


def test_the_target_is_read_from_the_rules_with_its_direction(tmp_path: Path) -> None:
    path = tmp_path / "closed_llama2_70b_lora.yaml"
    path.write_text(RULE.format(op="<=", x="0.925"))
    target = quality_target(path, "llama2_70b_lora")
    assert target is not None
    assert (target.gate.threshold, target.gate.direction) == (0.925, "min")
    path.write_text(RULE.format(op=">=", x="0.72"))
    target = quality_target(path, "llama2_70b_lora")
    assert target is not None and (target.gate.threshold, target.gate.direction) == (0.72, "max")


def test_the_newest_matching_rule_set_is_used(tmp_path: Path) -> None:
    names = ["training_3.1.0", "training_4.1.0", "training_4.0.0", "training_1.0.0"]
    for name in names:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "closed_bert.yaml").write_text(RULE.format(op=">=", x="0.72"))
    (tmp_path / "training_9.0.0").mkdir()
    (tmp_path / "training_9.0.0" / "closed_gpt3.yaml").write_text(RULE.format(op="<=", x="2.69"))
    chosen, notes = find_rules([tmp_path], "bert", "closed")
    assert chosen == tmp_path / "training_4.1.0" / "closed_bert.yaml"
    assert len(notes) == 1 and "closed_bert.yaml (the newest)" in notes[0]
    chosen, notes = find_rules([tmp_path], "bert", "open")  # no open rules: none, and said so
    assert chosen is None and "no compliance rules for bert (open)" in notes[0]

"""The two sides of a comparison as a user names them (``--group TAG=VALUE`` in the forms people type it, a
name, an id prefix), the replicate-group check and its message, and the catalog of causal factor values it
reads, on a real ledger of imported receipts (Megatron golden values with their model_config.yaml, which set
the seed, the learning rate and the environment). Expected values are written by hand from the inputs."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

import pytest
from helpers import CAUSAL

from ledger.analyses.groups import (
    Catalog,
    Entry,
    InvalidGroup,
    SameReceipt,
    Side,
    check_distinct,
    check_replicates,
    factor_keys,
    parse_group,
    resolve_side,
    tagged,
)
from ledger.errors import BadInput
from ledger.ingest.api import ingest_golden
from ledger.store import index
from ledger.store.receipts import Ledger


def _ingest(ledger: Ledger, tmp: Path, name: str, gpu: str, seed: int, lr: float, env: dict[str, str],
            tags: dict[str, str]) -> str:
    folder = tmp / name
    folder.mkdir()
    config = folder / "model_config.yaml"
    config.write_text("ENV_VARS:\n" + "".join(f"  {k}: '{v}'\n" for k, v in env.items())
                      + f"MODEL_ARGS:\n  --seed: {seed}\n  --lr: {lr}\n  --num-experts: 8\n  --moe-router-topk: 2\n"
                        "  --seq-length: 128\n  --global-batch-size: 4\n")
    values = folder / f"golden_values_dev_dgx_{gpu}.json"
    values.write_text(json.dumps({"lm loss": {"start_step": 1, "end_step": 3, "step_interval": 1,
                                              "values": {"1": 3.0, "2": 2.9 - seed / 100, "3": 2.8}}}))
    imported = ingest_golden(ledger, values, config, name=name, tags=tags)
    assert imported.receipt is not None
    return imported.receipt.id


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Ledger, dict[str, str]]:
    """r1 and r2: replicates (another seed, another Slurm job); r3: r1 with another learning rate; r4: r1 on an
    H100 with another NCCL algorithm. Tags: sweep=bf16 {r1, r2}, mix=yes {r1, r3}, hw=yes {r1, r4},
    eq=a=b {r2}."""
    ledger = Ledger(tmp_path / "receipts")
    ids = {
        "r1": _ingest(ledger, tmp_path, "r1", "a100", 1, 0.001, {"NCCL_ALGO": "Ring", "SLURM_JOB_ID": "11"},
                      {"sweep": "bf16", "mix": "yes", "hw": "yes"}),
        "r2": _ingest(ledger, tmp_path, "r2", "a100", 2, 0.001, {"NCCL_ALGO": "Ring", "SLURM_JOB_ID": "12"},
                      {"sweep": "bf16", "eq": "a=b"}),
        "r3": _ingest(ledger, tmp_path, "r3", "a100", 1, 0.002, {"NCCL_ALGO": "Ring", "SLURM_JOB_ID": "13"},
                      {"mix": "yes"}),
        "r4": _ingest(ledger, tmp_path, "r4", "h100", 1, 0.001, {"NCCL_ALGO": "Tree", "SLURM_JOB_ID": "14"},
                      {"hw": "yes"}),
    }
    return ledger, ids


def _in_order(ids: dict[str, str], *names: str) -> tuple[str, ...]:
    """The receipts in the index's order: imported receipts have no start time, so by id."""
    return tuple(sorted(ids[n] for n in names))


def test_a_group_is_the_receipts_whose_tag_has_exactly_that_value(runs: tuple[Ledger, dict[str, str]]) -> None:
    ledger, ids = runs
    with index.reader(ledger) as con:
        assert tagged(con, "sweep=bf16") == _in_order(ids, "r1", "r2")
        assert tagged(con, "hw=yes") == _in_order(ids, "r1", "r4")
        assert tagged(con, "eq=a=b") == (ids["r2"],)  # the value may hold "=": split at the first one
        for spec, tag, value in (("sweep=bf", "sweep", "bf"), ("sweep=BF16", "sweep", "BF16"),
                                 ("Sweep=bf16", "Sweep", "bf16"), ("sweep=", "sweep", ""),
                                 ("eq=a", "eq", "a")):
            with pytest.raises(InvalidGroup) as info:
                tagged(con, spec)
            assert str(info.value) == (f"no receipt is tagged {tag}={value}; `ledger ls --where tag.{tag}={value}` "
                                       "lists them")
        for spec in ("sweep", "=bf16", ""):
            with pytest.raises(InvalidGroup) as info:
                tagged(con, spec)
            assert str(info.value) == f"--group {spec!r}: expected KEY=VALUE, e.g. --group sweep=bf16"
    assert parse_group("a=b=c") == ("a", "b=c") and parse_group("k=") == ("k", "")


def test_a_side_from_a_ref_or_a_replicate_group(runs: tuple[Ledger, dict[str, str]]) -> None:
    ledger, ids = runs
    with index.reader(ledger) as con:
        catalog = Catalog.load(con)
        group = resolve_side(con, catalog, "A", group="sweep=bf16")
        assert group == Side("A", "--group sweep=bf16", _in_order(ids, "r1", "r2"), True)
        assert group.label == "--group sweep=bf16 (2 runs)"
        assert group.to_json(catalog) == {"spec": "--group sweep=bf16", "group": True,
                                          "ids": list(_in_order(ids, "r1", "r2")),
                                          "names": [catalog[i].name for i in _in_order(ids, "r1", "r2")]}
        assert sorted(group.to_json(catalog)["names"]) == ["r1", "r2"]
        one = resolve_side(con, catalog, "A", group="eq=a=b")
        assert one.label == "--group eq=a=b (1 run)" and one.ids == (ids["r2"],)
        named = resolve_side(con, catalog, "B", "r3")
        assert named == Side("B", "r3", (ids["r3"],), False) and named.label == "r3"
        assert named.to_json(catalog) == {"spec": "r3", "group": False, "ids": [ids["r3"]], "names": ["r3"]}
        prefix = ids["r4"][:10]
        assert resolve_side(con, catalog, "B", prefix) == Side("B", prefix, (ids["r4"],), False)
        # a ref wins over a group given with it
        assert resolve_side(con, catalog, "B", "r3", "sweep=bf16").ids == (ids["r3"],)
        with pytest.raises(BadInput) as info:
            resolve_side(con, catalog, "A")
        assert str(info.value) == "give a ref or --group TAG=VALUE for each side"


def test_a_group_that_is_not_one_configuration_is_refused_naming_the_factors(
        runs: tuple[Ledger, dict[str, str]]) -> None:
    ledger, ids = runs
    with index.reader(ledger) as con:
        catalog = Catalog.load(con)
        first, other = (catalog[i] for i in _in_order(ids, "r1", "r3"))
        with pytest.raises(InvalidGroup) as info:
            resolve_side(con, catalog, "A", group="mix=yes")
        assert str(info.value) == (
            f"--group mix=yes is not a replicate group: {other.name} ({other.id[:8]}) differs from {first.name} "
            f"({first.id[:8]}) in hyperparameters (members may differ only in the seed); tag replicates alone")
        first, other = (catalog[i] for i in _in_order(ids, "r1", "r4"))
        with pytest.raises(InvalidGroup, match=rf"^--group hw=yes is not a replicate group: {other.name} "
                                               rf"\({other.id[:8]}\) differs from {first.name} \({first.id[:8]}\) "
                                               r"in software, hardware \(members"):
            resolve_side(con, catalog, "A", group="hw=yes")
        # the odd member named is the first that differs; a member like the first is not named
        order = [ids["r2"], ids["r1"], ids["r4"], ids["r3"]]
        with pytest.raises(InvalidGroup) as info:
            check_replicates(catalog, order, "these")
        assert str(info.value).startswith(f"these is not a replicate group: r4 ({ids['r4'][:8]}) differs from "
                                          f"r2 ({ids['r2'][:8]}) in software, hardware, hyperparameters (members")
        check_replicates(catalog, [ids["r2"], ids["r1"]], "replicates")  # seed and Slurm job only: no error
        check_replicates(catalog, [ids["r3"]], "alone")


def test_the_catalog_holds_each_receipts_causal_values(runs: tuple[Ledger, dict[str, str]]) -> None:
    ledger, ids = runs
    with index.reader(ledger) as con:
        catalog = Catalog.load(con)
    assert sorted(catalog.entries) == sorted(ids.values())
    r1 = catalog[ids["r1"]]
    assert (r1.name, r1.tags, r1.label) == ("r1", {"sweep": "bf16", "mix": "yes", "hw": "yes"}, f"r1 ({ids['r1'][:8]})")
    assert r1.data["id"] == ids["r1"] and r1.data["workload"]["seed"] == 1
    assert sorted(r1.factors) == sorted(CAUSAL)
    assert json.loads(r1.factors["seed"]) == {"workload.seed": 1}
    assert json.loads(r1.factors["software"])["stack.environment"] == {"NCCL_ALGO": "Ring"}  # no Slurm job id
    assert json.loads(r1.factors["hyperparameters"])["workload.optimizer.lr"] == 0.001
    # replicates share every factor but the seed
    r2, r3 = catalog[ids["r2"]], catalog[ids["r3"]]
    assert r1.config_key() == r2.config_key() and r1.config_key(ignore=()) != r2.config_key(ignore=())
    assert len(r1.config_key()) == len(CAUSAL) - 1 and len(r1.config_key(ignore=())) == len(CAUSAL)
    assert r1.config_key() != r3.config_key()
    assert r1.config_key(ignore=("seed", "hyperparameters")) == r3.config_key(ignore=("hyperparameters", "seed"))
    assert r1.config_key(ignore=["hyperparameters"]) != r3.config_key(ignore=["hyperparameters", "seed"])
    unnamed = Entry("0123456789abcdef" * 4, None, {}, None, {}, factor_keys({}))
    assert unnamed.label == "0123456789ab"


def test_factor_keys_are_canonical_json_and_a_missing_part_is_null() -> None:
    keys = factor_keys({})
    assert sorted(keys) == sorted(CAUSAL)
    assert keys["seed"] == '{"workload.seed":null}'
    assert keys["precision"].startswith('{"workload.precision.autocast":null,"workload.precision.bf16_layers":null')
    # a part that is not a map (a damaged or foreign receipt) reads as null below it
    assert factor_keys({"workload": 5, "stack": {"environment": None}})["seed"] == '{"workload.seed":null}'
    env = {"stack": {"environment": {"RANK": "3", "B": "2", "A": "1"}}, "workload": {"seed": 9}}
    software = factor_keys(env)["software"]
    assert '"stack.environment":{"A":"1","B":"2"}' in software and " " not in software
    assert factor_keys(env)["seed"] == '{"workload.seed":9}'
    # the key order of the receipt does not matter
    flipped = {"workload": {"seed": 9}, "stack": {"environment": {"A": "1", "B": "2"}}}
    assert factor_keys(flipped) == factor_keys(env)


def test_a_receipt_can_be_on_one_side_only() -> None:
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    check_distinct(Side("A", "x", (a,), False), Side("B", "y", (b,), False))
    check_distinct(Side("A", "g", (a, b), True), Side("B", "h", (c,), True))
    with pytest.raises(SameReceipt) as info:
        check_distinct(Side("A", "x", (a,), False), Side("B", "x2", (a,), False))
    assert str(info.value) == f"A and B are the same receipt ({a[:12]}); give two different receipts"
    with pytest.raises(SameReceipt) as info:
        check_distinct(Side("A", "x", (a,), False), Side("B", "g", (b, a), True))
    assert str(info.value) == f"A and B share 1 receipt(s) ({a[:12]}); a receipt can be on one side only"
    with pytest.raises(SameReceipt) as info:
        check_distinct(Side("A", "g", (c, b, a), True), Side("B", "h", (b, c), True))
    assert str(info.value) == f"A and B share 2 receipt(s) ({b[:12]}, {c[:12]}); a receipt can be on one side only"


def test_the_catalog_keeps_when_each_run_started_and_a_group_is_oldest_first(tmp_path: Path) -> None:
    """Runs recorded through the SDK carry their start time (imported golden values do not): the catalog keeps it
    (the noise floor prefers the newest replicate groups by it) and a group lists its runs in that order."""
    import ledger
    import ledger.sdk

    lg = ledger.open(tmp_path / "receipts")
    started = {}
    for name in ("first", "second", "third"):
        with lg.recording(name=name, tags={"sweep": "x"}) as rec:
            ledger.sdk.current().log_step(1, loss=1.0)
        assert rec.receipt is not None and rec.receipt.started_at is not None
        started[rec.receipt.id] = rec.receipt.started_at
    with index.reader(Ledger(tmp_path / "receipts")) as con:
        catalog = Catalog.load(con)
        assert tagged(con, "sweep=x") == tuple(sorted(started, key=lambda i: (started[i], i)))
    for rid, when in started.items():
        entry = catalog[rid]
        assert entry.started_at is not None
        assert entry.started_at.replace(tzinfo=None) == when.astimezone(UTC).replace(tzinfo=None)
        assert entry.tags == {"sweep": "x"}

"""The terminal rendering of `ledger ls`, `show` and `query` (ledger/report/console.py), in process: each cell
written out by hand from the row (ids to 8 characters, times, SI rates, experts, tags, notes), which columns fit a
terminal of a given width (the widths added up by hand), the names people type for ``--columns`` and what a wrong
one says, a receipt's fields grouped by factor with bytes, rates and seconds for people, the nodes, stragglers and
the time lost waiting; user text never parsed as markup."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ledger.analyses.stragglers import NodeScore, RankScore, Stragglers
from ledger.errors import BadInput
from ledger.report import console
from schemas import Factor, Receipt

RID = "0123456789abcdef" * 4


@pytest.fixture
def out(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """What the module's console prints, at 250 columns (no colour)."""
    buf = io.StringIO()
    monkeypatch.setattr(console, "console", Console(file=buf, width=250, emoji=False, highlight=False,
                                                     color_system=None))
    return buf


def _row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": RID, "name": "fp8-grouped", "status": "failed", "problems": 2, "archived": True,
        "started_at": "2026-12-02T10:31:45+00:00", "duration_s": 185.0, "attempt": 2, "steps": 100,
        "final_loss": 2.34567, "tokens_per_s": 14523.0, "precision": "bf16", "num_experts": 8, "top_k": 2,
        "device": "cuda", "gpu_model": "H200", "tags": {"sweep": "lr", "owner": "a"}, "notes": 3}
    row.update(over)
    return row


BARE = _row(id="f" * 64, name=None, status="succeeded", problems=0, archived=False, started_at=None,
            duration_s=None, attempt=1, steps=None, final_loss=None, tokens_per_s=None, precision=None,
            num_experts=None, top_k=None, device=None, gpu_model=None, tags={}, notes=0)


def test_every_ls_column_of_a_full_and_a_bare_row() -> None:
    cells = {c: f(_row()) for c, f in console.LS_COLUMNS.items()}
    assert cells == {"id": "01234567", "name": "fp8-grouped", "status": "failed (2 problems) (archived)",
                     "started": "2026-12-02 10:31", "time": "3m 05s", "attempt": "2", "steps": "100",
                     "loss": "2.346", "tok/s": "14.5k", "precision": "bf16", "experts": "8x top2", "device": "cuda",
                     "gpu": "H200", "tags": "sweep=lr, owner=a", "notes": "3"}
    bare = {c: f(BARE) for c, f in console.LS_COLUMNS.items()}
    assert bare == {"id": "ffffffff", "name": "-", "status": "succeeded", "started": "-", "time": "-",
                    "attempt": "1", "steps": "-", "loss": "-", "tok/s": "-", "precision": "-", "experts": "-",
                    "device": "-", "gpu": "-", "tags": "", "notes": "-"}
    assert console.LS_COLUMNS["experts"](_row(num_experts=0)) == "-"
    assert console.LS_COLUMNS["status"](_row(problems=1, archived=False)) == "failed (1 problems)"
    assert console.LS_COLUMNS["status"]({"status": "imported", "problems": 0}) == "imported"  # no archived key
    assert console.LS_COLUMNS["loss"](_row(final_loss=0.000123456)) == "0.0001235"
    assert console.LS_COLUMNS["time"](_row(duration_s=7380)) == "2h 03m"


# the widths a column needs (its longest cell or name + 3), the wrapping ones capped at 12 + 3, for [_row(), BARE]:
# id 11, name 14, status 15 (30 + 3 capped), loss 8, tok/s 8, steps 8, time 9, precision 12, experts 10,
# started 19, tags 15 (17 + 3 capped); taken in priority order while they fit
@pytest.mark.parametrize(("width", "dropped"), [
    (129, []), (128, ["tags"]), (114, ["tags"]), (112, ["started"]), (110, ["started"]), (109, ["started", "tags"]),
    (95, ["started", "tags"]), (94, ["experts", "started", "tags"]),
    (40, ["started", "time", "steps", "loss", "tok/s", "precision", "experts", "tags"]),
    (39, ["status", "started", "time", "steps", "tok/s", "precision", "experts", "tags"]),  # loss: 25 + 8
])
def test_the_columns_that_fit_a_terminal(width: int, dropped: list[str]) -> None:
    assert console.fitting_columns([_row(), BARE], width) == [c for c in console.DEFAULT_LS_COLUMNS
                                                                if c not in dropped]


def test_the_first_column_is_kept_however_narrow() -> None:
    assert console.fitting_columns([_row()], 5) == ["id"]
    assert console.fitting_columns([_row()], 0) == ["id"]
    assert console.fitting_columns([_row()], 25, ("name", "id", "status")) == ["name", "id"]  # 14 + 11
    assert console.fitting_columns([_row()], 40, ("name", "id", "status")) == ["name", "id", "status"]  # + 15
    assert console.fitting_columns([_row()], 200, ("name", "id", "gpu")) == ["name", "id"]  # gpu: only when asked
    assert console.fitting_columns([], 11, ("status", "id")) == ["id"]  # the names alone: id 5, status 9


def _with_fields(**fields: Any) -> dict[str, Any]:
    return {**_row(), "fields": fields}


def test_columns_people_type_for_ls() -> None:
    rows = [_with_fields(**{"params.lr": "3e-3", "workload.seed": 1, "workload.model.num_experts": 8}),
            _with_fields(**{"params.train.yaml:batch": "64", "summary.final_loss": 2.0, "tags.owner": "a"})]
    assert console.table_columns(rows, ["id", "lr", "seed", "params.lr", "num_experts", "final_loss", "notes"]) == [
        "id", "params.lr", "workload.seed", "params.lr", "workload.model.num_experts", "summary.final_loss",
        "notes"]
    # the ls columns come first: `steps` is the ls column even where the runs have a summary.steps
    with_steps = [_with_fields(**{"summary.steps": 10, "stack.hardware.gpu_model": "H200"})]
    assert console.table_columns(with_steps, ["steps", "gpu", "gpu_model"]) == [
        "steps", "gpu", "stack.hardware.gpu_model"]
    with pytest.raises(BadInput) as err:
        console.table_columns(rows, ["name", "bogus", "owner"])
    assert str(err.value) == (
        "unknown column(s) 'bogus', 'owner' for --columns; choose from: id,name,status,started,time,attempt,steps,"
        "loss,tok/s,precision,experts,device,gpu,tags,notes; or a column of these runs: summary.final_loss,"
        "params.lr,params.train.yaml:batch,workload.seed,workload.model.num_experts")
    with pytest.raises(BadInput) as err:
        console.table_columns(rows, [])
    assert str(err.value).startswith("unknown column(s) (none given) for --columns; choose from: id,name,")
    many = [_with_fields(**{f"params.p{i:02d}": "1" for i in range(30)})]
    with pytest.raises(BadInput) as err:
        console.table_columns(many, ["nope"])
    assert str(err.value).endswith("; or a column of these runs: " + ",".join(f"params.p{i:02d}" for i in range(24))
                                   + ",...")
    exactly = [_with_fields(**{f"params.p{i:02d}": "1" for i in range(24)})]
    with pytest.raises(BadInput) as err:
        console.table_columns(exactly, ["nope"])
    assert str(err.value).endswith(",params.p23")
    with pytest.raises(BadInput) as err:
        console.table_columns([_row()], ["nope"])  # rows without fields: the built-in columns only
    assert str(err.value).endswith("choose from: id,name,status,started,time,attempt,steps,loss,tok/s,precision,"
                                   "experts,device,gpu,tags,notes")


@pytest.mark.parametrize(("value", "text"), [
    (True, "true"), (False, "false"), (0.000123456, "0.0001235"), (1234567.0, "1.235e+06"), (3, "3"),
    ("3e-3", "3e-3"), (None, "-"), ({"a": 1, "b": "x"}, "a=1, b=x"), (0.0, "0"),
])
def test_a_runs_table_value_in_a_cell(value: Any, text: str) -> None:
    assert console.field_text(value) == text


def _lines(buf: io.StringIO) -> list[str]:
    return [line.rstrip() for line in buf.getvalue().splitlines()]


def test_ls_prints_the_chosen_columns_and_the_count(out: io.StringIO) -> None:
    console.receipts_table([_row(), BARE], ["id", "name", "status", "time", "tok/s", "notes"])
    lines = _lines(out)[1:]  # a blank line first
    assert re.fullmatch(r" id\s+name\s+status\s+time\s+tok/s\s+notes", lines[0])
    assert re.fullmatch(r" 01234567\s+fp8-grouped\s+failed \(2 problems\) \(archived\)\s+3m 05s\s+14\.5k\s+3",
                        lines[2])
    assert re.fullmatch(r" ffffffff\s+-\s+succeeded\s+-\s+-\s+-", lines[3])
    assert lines[-1] == "2 receipt(s)"
    # time and tok/s right-justified: their last characters line up under their header's; notes to the left
    for name, value in (("time", "3m 05s"), ("tok/s", "14.5k")):
        assert lines[0].index(name) + len(name) == lines[2].index(value) + len(value)
    assert lines[0].index("notes") == lines[2].rindex("3") == lines[3].rindex("-")


def test_ls_without_columns_fits_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(console, "console", Console(file=buf, width=112, color_system=None))
    console.receipts_table([_row(), BARE])
    header = _lines(buf)[1].split()
    assert header == ["id", "name", "status", "time", "steps", "loss", "tok/s", "precision", "experts", "tags"]
    assert all(len(line) <= 112 for line in _lines(buf))


def test_ls_with_runs_table_columns(out: io.StringIO) -> None:
    rows = [_with_fields(**{"params.lr": "3e-3", "workload.seed": 1, "stack.code.dirty": False}),
            {**BARE, "fields": {"params.lr": 0.5}}]
    console.receipts_table(rows, ["id", "params.lr", "workload.seed", "stack.code.dirty"])
    lines = _lines(out)[1:]
    assert re.fullmatch(r" id\s+params\.lr\s+workload\.seed\s+stack\.code\.dirty", lines[0])
    assert re.fullmatch(r" 01234567\s+3e-3\s+1\s+false", lines[2])
    assert re.fullmatch(r" ffffffff\s+0\.5\s+-\s+-", lines[3])


def test_ls_refuses_a_column_no_row_has(out: io.StringIO) -> None:
    with pytest.raises(BadInput) as err:
        console.receipts_table([_row(), BARE], ["id", "params.lr", "lr"])
    assert str(err.value) == ("unknown column(s) 'params.lr', 'lr' for --columns; choose from: id,name,status,started,"
                              "time,attempt,steps,loss,tok/s,precision,experts,device,gpu,tags,notes")
    with pytest.raises(BadInput) as err:
        console.receipts_table([_row()], [])
    assert str(err.value) == ("unknown column(s) (none given) for --columns; choose from: id,name,status,started,"
                              "time,attempt,steps,loss,tok/s,precision,experts,device,gpu,tags,notes")
    console.receipts_table([{**_row(), "fields": {}}], ["id", "params.lr"])  # every row has its fields: a blank cell
    assert re.fullmatch(r" 01234567\s+-", _lines(out)[3])
    out.truncate(0)
    out.seek(0)
    console.receipts_table([{**_row(), "fields": {"params.lr": "0.1"}}, BARE], ["id", "params.lr"])  # BARE has none
    assert [line.split() for line in _lines(out)[3:5]] == [["01234567", "0.1"], ["ffffffff", "-"]]


def test_user_text_in_ls_is_shown_not_parsed(out: io.StringIO) -> None:
    console.receipts_table([_row(name="[bold]x[/bold]\x1b[2J", tags={"k": "[red]v"})], ["name", "tags"])
    printed = out.getvalue()
    assert "[bold]x[/bold]\\x1b[2J" in printed and "k=[red]v" in printed and "\x1b" not in printed


@pytest.mark.parametrize(("path", "value", "text"), [
    ("stack.hardware.memory_bytes", 85899345920, "80 GiB (85,899,345,920 B)"),
    ("summary.peak_memory_bytes", 1536.0, "1.5 KiB"),
    ("summary.tokens_per_s", 14523.0, "14.5k tok/s"),
    ("summary.samples_per_s", 1500.0, "1.5k"),
    ("summary.tokens", 2_000_000, "2M"),
    ("tokens", 950, "950"),
    ("workload.model.active_params", 1.2e9, "1.2G"),
    ("workload.model.params", 7_000, "7k"),
    ("workload.model.total_params", 3.0e12, "3T"),
    ("summary.step_time_s", 0.25, "0.25 s"),
    ("duration_s", 7380, "2h 03m"),
    ("summary.final_loss", 2.34567, "2.346"),
    ("workload.seed", 7, "7"),
    ("stack.code.dirty", True, "True"),
    ("summary.energy_method", "nvml", "nvml"),
    ("workload.precision.params", "bf16", "bf16"),  # a text field named like a count
    ("x.y_bytes", None, "-"),
])
def test_receipt_fields_for_people(path: str, value: Any, text: str) -> None:
    assert console.human(path, value) == text


def _receipt(**over: Any) -> Receipt:
    data: dict[str, Any] = {
        "id": RID, "run_uuid": "u" * 32, "name": "fp8 [bold]x[/bold]", "status": "failed", "exit_code": 1,
        "started_at": datetime(2026, 12, 2, 10, 31, 45, tzinfo=UTC), "duration_s": 185.0, "attempt": 2,
        "command": ["torchrun", "train.py", "--lr", "1e-3"],
        "stack": {"hardware": {"gpu_model": "H200", "gpu_count": 8, "memory_bytes": 2 * 1024**3, "hostname": "h"},
                  "software": {"python": "3.11.9", "packages": [{"name": "a", "version": "1"},
                                                                 {"name": "b", "version": "2"}]},
                  "code": {"commit": "deadbeef", "dirty": False}},
        "workload": {"model": {"num_experts": 8, "top_k": 2}, "seed": 7, "arguments": {"lr": "1e-3"}},
        "summary": {"steps": 100, "tokens_per_s": 14523.0, "final_loss": 2.5},
        "artifacts": [{"path": "steps.parquet", "kind": "table", "sha256": "ab" * 32, "bytes": 2048, "rows": 100},
                      {"path": "output.log", "kind": "log", "sha256": "cd" * 32, "bytes": 10, "rows": None}],
        "problems": [{"source": "telemetry", "message": "no GPU [b]seen[/b]"}],
    }
    data.update(over)
    return Receipt.model_validate(data)


def test_show_prints_a_receipt_grouped_by_factor(out: io.StringIO, tmp_path: Path) -> None:
    console.receipt(_receipt(), tmp_path)
    lines = _lines(out)
    assert lines[0] == f"{RID}  fp8 [bold]x[/bold]  [failed]  exit 1"
    assert lines[1] == "started 2026-12-02 10:31:45+00:00  duration 3m 05s  attempt 2  "[:-2]
    assert lines[2] == "command: torchrun train.py --lr 1e-3"
    titles = [line for line in lines if line in {f.value for f in Factor} | {"summary", "artifacts"}]
    # num_experts and top_k belong to the task (schemas: the frozen task), the arguments to their own factor
    assert titles == ["code", "software", "hardware", "arguments", "task", "seed", "summary", "artifacts"]
    text = "\n".join(lines)
    for path, shown in (("stack.code.commit", "deadbeef"), ("stack.code.dirty", "False"),
                        ("stack.software.packages", "2 packages"), ("stack.hardware.memory_bytes",
                                                                    r"2 GiB \(2,147,483,648 B\)"),
                        ("stack.hardware.gpu_count", "8"), ("workload.model.num_experts", "8"), ("workload.seed", "7"),
                        ("workload.arguments", "lr=1e-3"), ("steps", "100"), ("tokens_per_s", r"14\.5k tok/s"),
                        ("final_loss", "2.5"), ("energy_method", "not measured"), ("tokens", "-")):
        assert re.search(rf"^ *{re.escape(path)} +{shown}$", text, re.M), path
    assert "stack.hardware.hostname" not in text and "run_uuid" not in text  # bookkeeping is said once, on top
    assert re.search(r"│ steps\.parquet │ 100  │ 2 KiB │ abababababababab │", text)
    assert re.search(r"│ output\.log    │ -    │ 10 B  │ cdcdcdcdcdcdcdcd │", text)
    assert "problem telemetry: no GPU [b]seen[/b]" in lines
    assert lines[-1] == f"output: {tmp_path / 'output.log'}"
    at = lines.index("summary")
    assert lines[at + 1].split() == ["steps", "100"]  # no header row: each line a field and its value
    assert lines[lines.index("code") + 1].split() == ["stack.code.is_repo", "False"]
    at = lines.index("artifacts")
    assert re.fullmatch(r"┃ artifact +┃ rows ┃ bytes ┃ sha256 +┃", lines[at + 2])


def test_a_receipts_problems_in_yellow(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(console, "console", Console(file=buf, width=200, force_terminal=True,
                                                     color_system="standard"))
    console.receipt(_receipt())
    assert "\x1b[33mproblem telemetry: no GPU [b]seen[/b]\x1b[0m" in buf.getvalue()  # SGR 33: yellow


def test_show_without_a_directory_or_a_log(out: io.StringIO, tmp_path: Path) -> None:
    console.receipt(_receipt(name=None, artifacts=[], problems=[], stack={}, workload={}))
    lines = _lines(out)
    assert lines[0] == f"{RID}  unnamed  [failed]  exit 1"
    assert not any(line.startswith(("output:", "problem")) for line in lines)
    assert "software" not in lines and "task" not in lines and "seed" not in lines
    out.truncate(0)
    out.seek(0)
    console.receipt(_receipt(artifacts=[]), tmp_path)  # a directory, but no log in it
    assert not any(line.startswith("output:") for line in _lines(out))


def test_query_rows_the_first_thousand(out: io.StringIO) -> None:
    console.rows_table(["n", "[b]x"], [(i, 0.123456 if i == 0 else None) for i in range(1001)])
    lines = _lines(out)
    assert re.fullmatch(r"┃ n +┃ \[b\]x +┃", lines[1])
    assert re.fullmatch(r"│ 0 +│ 0\.1235 │", lines[3]) and re.fullmatch(r"│ 1 +│ - +│", lines[4])
    assert sum(bool(re.fullmatch(r"│ \d+ +│.*│", line)) for line in lines) == 1000
    assert re.fullmatch(r"│ 999 │ - +│", lines[-3])
    assert lines[-1] == "(first 1000 of 1001 rows; use --json for all)"
    out.truncate(0)
    out.seek(0)
    console.rows_table(["m"], [({"a": 1},)] * 1000)
    assert sum("a=1" in line for line in _lines(out)) == 1000 and "first 1000" not in out.getvalue()


def test_progress_is_silent_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with console.progress("reindexing") as update:
        update(1, 3)
        update(3, 3)
    assert capsys.readouterr() == ("", "")


def test_progress_draws_on_a_terminal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(console, "console", Console(force_terminal=True, file=io.StringIO()))
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("FORCE_COLOR", "1")
    with console.progress("reindexing") as update:
        update(2, 3)
    assert "reindexing" in capsys.readouterr().err


def _node(rank: int, host: str, **over: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"node_rank": rank, "hostname": host, "ranks": [2 * rank, 2 * rank + 1], "exit_code": 0,
                            "python": "3.11.9", "torch": "2.4.0", "drivers": {"nccl": "2.21.5", "gpu_driver": "550.54"},
                            "packages_digest": "abcdef0123456789", "container_digest": "sha256:0123456789abcdef",
                            "code_commit": "0123456789abcdef", "code_digest": "deadbeefcafe", "gpu_model": "H200",
                            "gpu_count": 8, "gpu_clocks": "1980 MHz", "ecc": "on", "ecc_errors": 2,
                            "gpu_topology": "NV18", "cpu_topology": "2x56", "cpu_governor": "performance",
                            "cpu_max_mhz": 3800}
    node.update(over)
    return node


def _stragglers(**over: Any) -> Stragglers:
    ranks = [RankScore(3, 1, "host-b", 50, 0.3125, 0.80, 0.75), RankScore(2, 1, "host-b", 50, 0.30, 0.83, 0.95),
             RankScore(1, 0, None, 50, 0.26, 0.96, 1.0), RankScore(0, None, None, 50, 0.25, 1.0, 1.0)]
    data: dict[str, Any] = {"ranks": ranks, "nodes": [NodeScore(1, "host-b", (2, 3), 0.80, 3),
                                                       NodeScore(0, "host-a", (0, 1), 0.96, 1)],
                            "stragglers": [ranks[0]], "wait_s": 12.5, "paced_s": 100.0, "steps_compared": 50,
                            "threshold": 0.9, "excluded_phases": []}
    data.update(over)
    return Stragglers(**data)


def test_nodes_their_differences_and_the_stragglers(out: io.StringIO) -> None:
    r = _receipt(stack={"nodes": [_node(0, "host-a"),
                                  _node(1, "host-b", status="lost", detail="no heartbeat [x]", ranks=[], exit_code=None,
                                        code_digest=None, gpu_model=None, gpu_count=4, ecc_errors=None,
                                        gpu_clocks=None, packages_digest=None, container_digest=None,
                                        code_commit=None)]})
    console.nodes_and_stragglers(r, [(Factor.SOFTWARE, "torch 2.4.0 vs 2.5.0")], _stragglers())
    lines = _lines(out)
    text = "\n".join(lines)
    assert lines[0] == "nodes"
    assert re.fullmatch(r"┃ node ┃ host +┃ status ┃ ranks ┃ exit ┃ python ┃ torch ┃ NCCL +┃ driver ┃ packages +┃ "
                        r"container +┃ code +┃ GPU +┃", lines[2])
    at = lines.index("node hardware (probed on each node where available)")
    assert re.fullmatch(r"┃ node ┃ GPU clocks +┃ ECC +┃ GPU topology ┃ CPU topology ┃ CPU governor ┃ CPU max MHz ┃",
                        lines[at + 2])
    at = lines.index("slowest ranks (work = timed phases without collectives)")
    assert re.fullmatch(r"┃ rank ┃ node +┃ steps ┃ median work s ┃ relative ┃ individual ┃", lines[at + 2])
    assert re.search(r"│ 0 +│ host-a │ ended +│ 0,1 +│ 0 +│ 3\.11\.9 │ 2\.4\.0 │ 2\.21\.5 │ 550\.54 │ abcdef012345 +│ "
                     r"sha256:0123456789ab │ 0123456789\+deadbeef │ 8x H200 │", text)
    assert re.search(r"│ 1 +│ host-b │ lost +│ - +│ - +│ 3\.11\.9 │ 2\.4\.0 │ 2\.21\.5 │ 550\.54 │ - +│ - +│ - +│ 4 +│",
                     text)
    assert re.search(r"│ 0 +│ 1980 MHz +│ on, 2 uncorrected errors │ NV18 +│ 2x56 +│ performance +│ 3800 +│", text)
    assert re.search(r"│ 1 +│ not available │ on +│ NV18 +│", text)
    assert "node 1: no heartbeat [x]" in lines and not any(line.startswith("node 0:") for line in lines)
    assert "nodes differ (software) torch 2.4.0 vs 2.5.0" in lines
    assert "slowest ranks (work = timed phases without collectives)" in text
    assert re.search(r"│ 3 +│ 1 \(host-b\) │ 50 +│ 0\.3125 +│ 0\.80 +│ 0\.75 +│", text)
    assert re.search(r"│ 2 +│ 1 \(host-b\) │ 50 +│ 0\.3 +│ 0\.83 +│ 0\.95 +│", text)
    assert re.search(r"│ 1 +│ 0 +│ 50 +│ 0\.26 +│ 0\.96 +│ 1\.00 +│", text)
    assert not re.search(r"│ 0 +│ - +│ 50 +│", text)  # three ranks shown, one straggler
    assert "node scores (slowest rank's): node 1 (host-b) 0.80 (rank 3), node 0 (host-a) 0.96 (rank 1)" in lines
    assert "stragglers (score < 0.9): rank 3 0.75" in lines
    assert lines[-1] == ("waiting on slower ranks: 12.5 s over 50 steps (12.5% of their paced step time; goodput "
                         "bucket straggler_wait)")


def test_more_stragglers_than_three_are_all_listed_and_no_paced_time_is_no_share(out: io.StringIO) -> None:
    many = [RankScore(i, None, None, 10, 1.0 + i, 0.5, 0.5) for i in range(5)]
    s = _stragglers(ranks=many, stragglers=many, nodes=[NodeScore(0, "a", (0,), 0.5, 4)], paced_s=0.0, wait_s=0.0,
                    excluded_phases=["all_to_all", "allreduce"])
    console.nodes_and_stragglers(_receipt(), [], s)
    lines = _lines(out)
    assert "slowest ranks (work = timed phases without all_to_all, allreduce)" in " ".join(lines)
    assert sum(bool(re.fullmatch(r"│ \d +│ - +│ 10 +│.*", line)) for line in lines) == 5
    assert not any(line.startswith("node scores") for line in lines)  # one node: nothing to compare
    assert "stragglers (score < 0.9): rank 0 0.50, rank 1 0.50, rank 2 0.50, rank 3 0.50, rank 4 0.50" in lines
    assert lines[-1].startswith("waiting on slower ranks: 0 s over 50 steps (0.0% of their paced step time")


def test_one_rank_or_none_is_no_straggler_table(out: io.StringIO) -> None:
    console.nodes_and_stragglers(_receipt(), [], None)
    console.nodes_and_stragglers(_receipt(), [], _stragglers(ranks=[RankScore(0, 0, "a", 5, 1.0, 1.0, 1.0)]))
    assert out.getvalue() == ""
    console.nodes_and_stragglers(_receipt(), [(Factor.DRIVERS, "a [b]b[/b]")], _stragglers(stragglers=[]))
    lines = _lines(out)
    assert lines[0] == "nodes differ (drivers) a [b]b[/b]"
    assert not any(line.startswith("stragglers") for line in lines)


def test_the_logs_path_is_one_line_on_a_narrow_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(console, "console", Console(file=buf, width=30, color_system=None))
    deep = tmp_path / ("a-long-folder-name-" * 3) / "receipt"
    console.receipt(_receipt(), deep)
    assert buf.getvalue().splitlines()[-1] == f"output: {deep / 'output.log'}"  # whole, to copy and paste


def test_the_time_lost_waiting_as_a_share_of_under_a_second_of_paced_time(out: io.StringIO) -> None:
    console.nodes_and_stragglers(_receipt(), [], _stragglers(wait_s=0.25, paced_s=0.5, steps_compared=2))
    assert _lines(out)[-1] == ("waiting on slower ranks: 0.25 s over 2 steps (50.0% of their paced step time; goodput "
                               "bucket straggler_wait)")


def test_ls_on_a_narrow_terminal_keeps_ids_statuses_and_headers_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(console, "console", Console(file=buf, width=40, color_system=None))
    long = _row(name="a-very-long-run-name-that-wraps", status="succeeded", problems=0, archived=False)
    console.receipts_table([long, BARE], ["id", "name", "status", "time", "tok/s"])
    lines = _lines(buf)
    # the narrowest these columns can be: 8 + 6 (name's minimum) + 9 + 6 + 5, 3 between each two, 1 at each edge:
    # 48 characters (47 without the edge's space); the lines run past the terminal's edge, never cut short
    assert max(len(line) for line in lines) == 47
    words = " ".join(lines).split()
    assert {"id", "name", "status", "time", "tok/s", "01234567", "ffffffff", "3m", "05s", "14.5k"} <= set(words)
    assert words.count("succeeded") == 2  # 9 characters: the status column is never narrower
    assert " 3m 05s " in lines[3] and " 14.5k" in lines[3]  # numbers never folded over two lines
    start, end = lines[1].index("name"), lines[1].index("status")
    name = "".join(line[start:end].strip() for line in lines[3:9])
    assert name == "a-very-long-run-name-that-wraps"  # folded over lines, never cut
    assert "…" not in buf.getvalue()

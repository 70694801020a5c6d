"""The typed Python API: one object for a ledger directory, one method per capability.

    import ledger
    lg = ledger.open("receipts")                     # a Ledger
    runs = lg.receipts(where="precision=bf16")       # schemas.Receipt models, oldest first
    steps = lg.table("steps", refs=runs)             # a pyarrow.Table with receipt_id; .to_pandas() as you like
    result = lg.compare("baseline", "bf16")          # a Comparison; result.to_json()

Every method is a thin call into the package that holds the capability (store, record, ingest, analyses,
replay, planning) and returns that package's typed result, each with ``.to_json()``. The CLI makes the same
calls.
Importing this module imports nothing heavy: each method imports what it needs when it runs, so ``import
ledger`` stays light for training processes (which import ``ledger.sdk``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, TypedDict, cast

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from typing_extensions import Unpack

    from ledger.analyses.compare import Comparison as _Comparison
    from ledger.analyses.compare import Ref
    from ledger.analyses.gates import GroupGates, RunGates
    from ledger.analyses.goodput import Goodput
    from ledger.analyses.history import History
    from ledger.ingest.api import Imported
    from ledger.planning.api import LawReport, PerfReport
    from ledger.planning.plan import PlanResult
    from ledger.record.inprocess import Recording
    from ledger.record.wrapper import RecordResult
    from ledger.replay.claims import ClaimCheck
    from ledger.store import receipts as store
    from ledger.store.annotation import Annotation
    from schemas import Receipt

    class Comparison(_Comparison):
        """:class:`ledger.analyses.compare.Comparison` with ``.to_json()``."""

        def to_json(self) -> dict[str, Any]: ...


IngestKind = Literal["megatron", "mlperf", "golden", "trace", "log"]


class PlanOptions(TypedDict, total=False):
    """Keyword options of :meth:`Ledger.plan`: the fields of :class:`ledger.planning.api.PlanRequest` beyond
    hardware, nodes and days (what `ledger plan`'s options set; a test keeps the two in step). The grids take
    sequences of numbers (or the command line's comma lists)."""

    goodput: float | None
    goodput_from: str | None
    law: str | None
    perf_from: str | os.PathLike[str] | None
    tokens: float | None
    budget_flops: float | None
    geometry: str | None
    parallel: str | None
    experts: Sequence[int] | str
    top_k: Sequence[int] | str
    granularity: Sequence[float] | str
    widths: Sequence[int] | str
    micro_batch: Sequence[int] | str
    aspect: float
    max_sparsity: float | None
    seq_len: int
    vocab: int
    batch_tokens: float
    precision: str
    draws: int
    seed: int
    sensitivity: bool


def open(path: str | os.PathLike[str] | None = None) -> Ledger:  # noqa: A001 (ledger.open, like io.open)
    """The ledger in ``path`` (default: ``$LEDGER_DIR``, else ``./receipts``). Nothing is read yet; a
    directory that does not exist is an empty ledger until something is recorded into it."""
    from ledger.store.layout import ledger_dir

    return Ledger(ledger_dir(path))


def group(tag_value: str) -> Ref:
    """One side of a comparison as a replicate group, ``TAG=VALUE``: ``lg.compare("base", group("sweep=bf16"))``."""
    from ledger.analyses.compare import Ref
    from ledger.analyses.groups import parse_group

    parse_group(tag_value)
    return Ref(group=tag_value)


@dataclass(frozen=True)
class LawFitResult:
    """``Ledger.fit_law``: :class:`ledger.planning.api.LawReport` (the fit, the receipts used and skipped)."""

    report: LawReport

    def to_json(self) -> dict[str, Any]:
        """What ``ledger fit law --json`` prints (and ``ledger plan --law`` reads)."""
        return self.report.to_dict()


@dataclass(frozen=True)
class PerfFitResult:
    """``Ledger.fit_perf``: :class:`ledger.planning.api.PerfReport` (one calibration per hardware profile)."""

    report: PerfReport

    def to_json(self) -> dict[str, Any]:
        """What ``ledger fit perf --json`` prints (and ``ledger plan --perf-from`` reads)."""
        return self.report.to_dict()


@dataclass(frozen=True)
class PlanOutcome:
    """``Ledger.plan``: :class:`ledger.planning.plan.PlanResult`."""

    result: PlanResult

    def to_json(self) -> dict[str, Any]:
        """What ``ledger plan --json`` prints."""
        data: dict[str, Any] = self.result.to_dict()
        return data


@dataclass
class Ledger:
    """A ledger directory (see :func:`open`)."""

    root: Path
    _store: store.Ledger | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    @property
    def store(self) -> store.Ledger:
        """The store's view of the directory (:class:`ledger.store.receipts.Ledger`)."""
        if self._store is None:
            from ledger.store.receipts import Ledger as StoreLedger

            self._store = StoreLedger(self.root)
        return self._store

    # ------------------------------------------------------------------------------------- reading
    def receipts(self, where: str | None = None) -> list[Receipt]:
        """Every receipt (oldest first), or those matching a ``--where`` expression such as
        ``"precision=bf16 and tag.sweep=lr"``, as validated :class:`schemas.Receipt` models."""
        from ledger.store import reading

        return [self.store.load(row["id"]) for row in reading.list_receipts(self.store, where)]

    def runs(self, where: str | None = None, *, archived: bool = False) -> pd.DataFrame:
        """The runs as a pandas DataFrame, one row per receipt (oldest first), as ``mlflow.search_runs`` gives:
        ``id``, ``name``, ``status``, ``started_at``, ``ended_at`` (UTC), ``duration_s``, ``exit_code``,
        ``attempt``, ``archived``, ``notes``, then ``summary.*`` (final_loss, tokens_per_s, step_time_s,
        peak_memory_bytes, ..., ``summary.final_eval.<series>``), ``tags.*``, ``params.*`` (the launch's own
        arguments and config-file keys, as text), ``workload.*`` (hyperparameters, model, router, precision,
        parallelism...) and a few ``stack.*`` columns (:mod:`ledger.store.runs`). Every column name is a
        ``where`` key: ``lg.runs("params.lr<1e-3 and loss<3")``. Archived runs are left out unless
        ``archived``. Needs pandas (the ``pandas`` extra; :class:`ledger.errors.MissingExtra` says so)."""
        from ledger.store import reading, runs

        runs.pandas()
        rows = reading.list_receipts(self.store, where, archived=archived, fields=True)
        return runs.frame([row["fields"] for row in rows])

    def steps(self, ref: str | Receipt) -> pd.DataFrame:
        """One run's steps as a pandas DataFrame in recorded order: step, printed_step, epoch, time, tokens,
        loss, lr, grad_norm, step_time_s, tokens_per_s, ... and each custom metric (the steps table's ``extra``)
        as a column of its own. Needs pandas (the ``pandas`` extra)."""
        from ledger.store import index, runs
        from ledger.store.refs import resolve

        runs.pandas()
        with index.reader(self.store) as con:
            table = runs.steps_table(con, resolve(con, ref if isinstance(ref, str) else ref.id))
        return table.to_pandas()

    def notes(self, ref: str | Receipt) -> list[Annotation]:
        """What the team added to a receipt after it was sealed (`ledger note`, `archive`): its records, oldest
        first (:class:`ledger.store.annotation.Annotation`: kind, text, author, at)."""
        from ledger.store import annotation, reading

        return annotation.of(self.root, reading.resolve_ref(self.store, ref if isinstance(ref, str) else ref.id))

    def note(self, ref: str | Receipt, text: str, *, author: str | None = None) -> Annotation:
        """``ledger note REF TEXT``: append a note to a receipt, with its author (default ``$LEDGER_AUTHOR``,
        else user@host) and time. The sealed receipt is untouched: the note is a record beside it."""
        return self._annotate(ref, "note", text, author)

    def archive(self, ref: str | Receipt, *, reason: str = "", author: str | None = None) -> Annotation:
        """``ledger archive REF``: hide a receipt from ``ls``, the web view and :meth:`runs` (``--all`` and
        ``archived=True`` show it); a record beside the receipt, undone by :meth:`unarchive`."""
        return self._annotate(ref, "archive", reason, author)

    def unarchive(self, ref: str | Receipt, *, reason: str = "", author: str | None = None) -> Annotation:
        """``ledger unarchive REF``: show an archived receipt again (another record: the history is kept)."""
        return self._annotate(ref, "unarchive", reason, author)

    def _annotate(self, ref: str | Receipt, kind: Literal["note", "archive", "unarchive"], text: str,
                  author: str | None) -> Annotation:
        from ledger.redact import Redactor
        from ledger.store import annotation, reading

        receipt_id = reading.resolve_ref(reading.existing(self.store), ref if isinstance(ref, str) else ref.id)
        return annotation.add(self.root, receipt_id, kind, text, author, redact=Redactor(os.environ).text)

    def get(self, ref: str) -> Receipt:
        """One receipt by id, unique id prefix or name, checked against its digests (a damaged one raises
        :class:`ledger.errors.DamagedReceipt` naming the file)."""
        from ledger.store import reading

        return reading.show(self.store, ref)

    def table(self, name: str, refs: Iterable[str | Receipt] | None = None) -> pa.Table:
        """A metric table (``steps``, ``evals``, ``routing``, ``timing``, ``events``, ``telemetry``) of some
        receipts (refs or models; all when None), with its ``receipt_id`` column, in recorded order."""
        from ledger.errors import BadInput
        from ledger.store import index
        from ledger.store.refs import resolve
        from schemas.tables import TABLES

        if name not in TABLES:
            raise BadInput(f"no table {name!r}; the tables are {', '.join(TABLES)}")
        with index.reader(self.store) as con:
            ids = None if refs is None else [resolve(con, r if isinstance(r, str) else r.id) for r in refs]
            where = ""
            if ids is not None:
                where = f" WHERE receipt_id IN ({', '.join('?' for _ in ids)})" if ids else " WHERE false"
            table: pa.Table = con.sql(f'SELECT * FROM "{name}"{where} ORDER BY rowid', params=ids or None
                                      ).to_arrow_table()
            return table

    def query(self, sql: str) -> pa.Table:
        """One read-only SELECT over the index (``ledger query``): ``receipts`` and the metric tables."""
        from ledger.store import reading

        return reading.read_only_query(self.store, sql)

    # ------------------------------------------------------------------------------------ analyses
    def compare(self, a: str | Ref, b: str | Ref, *, allow_task_change: bool = False, attribution: bool = True,
                plugins: bool = True, replicates: bool = True, noise_floor: bool = True, alpha: float = 0.05,
                level: float = 0.95, n_boot: int = 2000, seed: int = 0, noise: float | None = None) -> Comparison:
        """``ledger compare A B``: what changed by factor, every metric side by side with a CI and a verdict,
        attribution and the missing runs. A side is a ref or :func:`group` ``("TAG=VALUE")``; ``replicates``
        (a one-receipt side takes the ledger's replicates of it) and ``noise_floor`` are `--no-replicates`
        and `--no-floor` when False. As the CLI does (it calls this), it first checks that the receipts
        compared are intact and that the index holds exactly their files' data
        (:class:`ledger.errors.DamagedReceipt` otherwise)."""
        from ledger.analyses.compare import CompareOptions, Ref, compare
        from ledger.analyses.metrics import Settings
        from ledger.store import index
        from ledger.store.agreement import check_involved

        sides = [Ref(ref=s) if isinstance(s, str) else s for s in (a, b)]
        options = CompareOptions(allow_task_change, Settings(alpha=alpha, level=level, n_boot=n_boot, seed=seed,
                                                             noise=noise), attribution, plugins,
                                 replicates=replicates, noise_floor=noise_floor)
        with index.reader(self.store) as con:
            result = compare(con, sides[0], sides[1], options)
            check_involved(self.store, con, [r.id for r in result.runs_a + result.runs_b])  # files and index agree
        return _with_to_json(result)

    def claim(self, a: str, b: str, *, at: str | None = None, replay_output: IO[bytes] | None = None
              ) -> ClaimCheck:
        """``ledger claim A B [--at DIM=V]``: the claim the comparison supports, with its CI (``supported`` is
        False, with the commands that get the missing evidence, when between-run evidence is missing); with
        ``at`` (``"layers=x2"``), both sides' runs replayed at that scale and whether the claim holds there
        (:func:`ledger.replay.claims.claim`)."""
        from ledger.replay.claims import claim

        return claim(self.store, a, b, at, replay_output=replay_output)

    def history(self, where: str | None = None, metric: str = "tokens/s per device") -> History:
        """``ledger history``: change points in each configuration's history (or the series ``where`` selects)
        in a per-run ``metric`` (:mod:`ledger.analyses.history`)."""
        from ledger.analyses.history import history
        from ledger.store import index

        with index.reader(self.store) as con:
            return history(con, where, metric)

    def goodput(self, ref: str) -> Goodput:
        """``ledger goodput REF``: goodput and badput of the logical run any attempt's ref belongs to."""
        from ledger.analyses.goodput_index import goodput

        return goodput(self.store, ref)

    def gate(self, ref: str | None = None, *, group: str | None = None, gate: str | None = None,
             price_per_device_hour: float | None = None, config: str | os.PathLike[str] | None = None,
             ) -> RunGates | GroupGates:
        """``ledger gate``: time, device-hours, energy and money to first reach each quality gate, for one
        run (``ref``) or every run tagged ``group="TAG=VALUE"`` (censored runs kept)."""
        from ledger.analyses.gates import gate_report, group_report
        from ledger.analyses.pricing import load_pricing
        from ledger.errors import BadInput

        if (ref is None) == (group is None):
            raise BadInput("give either a ref or group='TAG=VALUE' (not both)")
        pricing = load_pricing(Path(config) if config is not None else None, price_per_device_hour)
        if group is not None:
            return group_report(self.store, group, gate, pricing)
        assert ref is not None
        return gate_report(self.store, ref, gate, pricing)

    # ------------------------------------------------------------------------------------ planning
    def fit_law(self, where: str | None = None, *, loss: Literal["train", "val"] = "train",
                at_tokens: Sequence[float] | None = None, bootstrap: int = 200, inits: int = 24,
                huber_delta: float | None = None, seed: int = 0) -> LawFitResult:
        """``ledger fit law``: the sparse-MoE scaling law fitted on the receipts matching ``where``
        (:func:`ledger.planning.api.fit_law`)."""
        from ledger.planning import api

        return LawFitResult(api.fit_law(self.store, where, loss, list(at_tokens) if at_tokens else None,
                                        bootstrap=bootstrap, inits=inits, huber_delta=huber_delta, seed=seed))

    def fit_perf(self, where: str | None = None, *, hardware: str | None = None) -> PerfFitResult:
        """``ledger fit perf``: the performance model calibrated on the receipts matching ``where``
        (:func:`ledger.planning.api.fit_perf`)."""
        from ledger.planning import api

        return PerfFitResult(api.fit_perf(self.store, where, hardware))

    def plan(self, hardware: str, nodes: int, days: float, **options: Unpack[PlanOptions]) -> PlanOutcome:
        """``ledger plan``: the cluster-optimal geometry and parallel plan for ``nodes`` nodes of ``hardware``
        (a profile name or file) over ``days`` (:func:`ledger.planning.api.plan`). ``options``:
        :class:`PlanOptions` (``goodput=0.85``, ``goodput_from="crashy-run"``, ``law=...``,
        ``precision="fp8"``, ``experts=(8, 16)``...)."""
        from ledger.planning import api

        grids = ("experts", "top_k", "granularity", "widths", "micro_batch")
        given: dict[str, Any] = dict(options)
        fields: dict[str, Any] = {k: ",".join(f"{x:g}" for x in v) if k in grids and not isinstance(v, str) else v
                                  for k, v in given.items()}
        if fields.get("perf_from") is not None:
            fields["perf_from"] = Path(fields["perf_from"])
        request = api.PlanRequest(hardware=hardware, nodes=nodes, days=days, **fields)
        return PlanOutcome(api.plan(request, lambda: self.store))

    # ------------------------------------------------------------------------------------- writing
    def ingest(self, kind: IngestKind, path: str | os.PathLike[str], *, name: str | None = None,
               tags: Mapping[str, str] | None = None, args_from: str | os.PathLike[str] | None = None,
               routing: str | os.PathLike[str] | None = None, system: str | os.PathLike[str] | None = None,
               rules: Sequence[str | os.PathLike[str]] = (), config: str | os.PathLike[str] | None = None,
               into: str | None = None, fmt: str = "auto", parse: str | None = None) -> Imported:
        """``ledger ingest KIND PATH``: evidence another tool wrote, published as an ``imported`` receipt.
        Options by kind: megatron ``args_from``, ``routing``; mlperf ``system``, ``rules``; golden ``config``;
        trace ``into`` (the receipt the trace belongs to, required); log ``fmt`` (a format of `ledger ingest
        log --format`), ``parse`` (a regex of named groups). An option another kind takes is refused."""
        from ledger.errors import BadInput
        from ledger.ingest import api

        given = {"args_from": args_from, "routing": routing, "system": system, "rules": tuple(rules) or None,
                 "config": config, "into": into, "fmt": None if fmt == "auto" else fmt, "parse": parse}
        takes = {"megatron": ("args_from", "routing"), "mlperf": ("system", "rules"), "golden": ("config",),
                 "trace": ("into",), "log": ("fmt", "parse")}
        if kind not in takes:
            raise BadInput(f"unknown ingest kind {kind!r}: use {', '.join(takes)}")
        stray = [k for k, v in given.items() if v is not None and k not in takes[kind]]
        if stray:
            raise BadInput(f"ingest({kind!r}, ...) takes no {', '.join(stray)}; it takes "
                           f"{', '.join(takes[kind]) or 'no options'} (besides name and tags)")

        def opt(value: str | os.PathLike[str] | None) -> Path | None:
            return None if value is None else Path(value)

        if kind == "megatron":
            return api.ingest_megatron(self.store, Path(path), opt(args_from), name, opt(routing), tags)
        if kind == "mlperf":
            return api.ingest_mlperf(self.store, Path(path), opt(system), [Path(r) for r in rules], name, tags)
        if kind == "golden":
            return api.ingest_golden(self.store, Path(path), opt(config), name, tags)
        if kind == "log":
            return api.ingest_log(self.store, Path(path), fmt, parse, name, tags)
        if into is None:
            raise BadInput("ingest('trace', ...) needs into=REF (the receipt the trace belongs to)")
        return api.ingest_trace(self.store, Path(path), into, name=name)

    def record(self, command: Sequence[str], *, name: str | None = None, tags: Mapping[str, str] | None = None,
               attempt_of: str | None = None, replicates: str | None = None, baseline: str | None = None,
               env_names: Sequence[str] = (), telemetry_interval: float = 1.0,
               cwd: str | os.PathLike[str] | None = None) -> RecordResult:
        """``ledger record -- COMMAND``: run a launch as a child process and publish its receipt. The result
        holds the receipt (None when it could not be published; the data is then kept for ``ledger
        recover``) and the child's exit code."""
        from ledger.record.wrapper import RecordOptions
        from ledger.record.wrapper import record as run_record
        from ledger.store.links import resolve_links

        links = resolve_links(self.store, attempt_of=attempt_of, replicates=replicates, baseline=baseline)
        opts = RecordOptions(command=list(command), name=name, tags=dict(tags or {}), env_names=tuple(env_names),
                             telemetry_interval=telemetry_interval, cwd=Path(cwd) if cwd else Path.cwd(), **links)
        return run_record(self.store, opts)

    @contextmanager
    def recording(self, *, name: str | None = None, tags: Mapping[str, str] | None = None,
                  attempt_of: str | None = None, replicates: str | None = None, baseline: str | None = None,
                  env_names: Sequence[str] = ()) -> Iterator[Recording]:
        """Record the body of a ``with`` block, in this process, as one receipt; ``ledger.sdk.current()``
        inside it is the block's run (so training code written for ``ledger record`` runs unchanged)::

            with lg.recording(name="notebook") as rec:
                train(ledger.sdk.current())
            rec.receipt.id
        """
        from ledger.record.inprocess import recording
        from ledger.store.links import resolve_links

        links = resolve_links(self.store, attempt_of=attempt_of, replicates=replicates, baseline=baseline)
        with recording(self.store, name=name, tags=tags, env_names=tuple(env_names), **links) as rec:
            yield rec


_COMPARISON: type | None = None


def _with_to_json(c: _Comparison) -> Comparison:
    """The same comparison, as an instance of a subclass that adds ``.to_json()``
    (:func:`ledger.analyses.compare.to_json`)."""
    global _COMPARISON
    from ledger.analyses import compare as module

    if _COMPARISON is None:
        def to_json(self: _Comparison) -> dict[str, Any]:
            """The comparison as JSON-able data with stable keys (``ledger compare --json``)."""
            return module.to_json(self)

        _COMPARISON = type("Comparison", (module.Comparison,), {"to_json": to_json, "__module__": __name__})
    out: Any = object.__new__(_COMPARISON)
    out.__dict__.update(c.__dict__)
    return cast("Comparison", out)


__all__ = ["Ledger", "LawFitResult", "PerfFitResult", "PlanOptions", "PlanOutcome", "group", "open"]

"""Generic step lines: ``key=value``, ``key: value`` or ``key value`` pairs, e.g.::

    step 10 loss 2.345 lr 0.001
    step=10 loss=2.345 lr=1e-3 grad_norm=0.9
    Step 1: loss=10.2313
    epoch 2 iter 20/50 | loss=2.1 | lr 3.0e-4 | 640.0 samples/sec

A line is a step only when it names the step (``step``, ``iter``, ``iteration``, ``global_step``, ``update``,
``num_updates``) with a whole number *and* gives at least one number under a training metric's name (a name
containing ``loss``, or ``lr`` / ``learning_rate`` / ``grad_norm`` / ``ppl`` / ``perplexity``). So
``saving checkpoint at step 1000``, ``Epoch 5/5`` or a progress bar are never steps. A line that gives the
same name twice with different values (``train loss 1.2, val loss 1.4``) is ambiguous: counted as unparsed,
never guessed. When the step is written ``step: N`` or ``step=N``, only pairs written with ``:`` or ``=``
count (so a date later in the line, ``Tue Sep 17``, is not a metric); ``step N`` accepts ``name value`` pairs.
Each name takes the first number after it. Names ``val_*``, ``valid_*``, ``eval_*``, ``test_*`` (or with ``/``)
are evals of that split at the line's step (``step 100 loss 2.1 val_loss 2.3``). A source file and its line
number, as a logging prefix writes them (``train.py:212]``, ``[trainer.cc:88]``), are not a metric.

What a line says about itself, and how names map:

- a step counter printed against a total, ``iter 20/50`` or ``step: 2300/ 3305``: the step is the counter (20)
  and the total goes to the reserved ``@total`` (:data:`.base.TOTAL`); the step is never renumbered here;
- ``epoch N`` goes to the reserved ``epoch`` (:data:`.base.EPOCH`; the total of ``epoch 2/3`` is dropped);
- a number may carry a decimal multiplier glued to it (``43.2K``, :func:`.base.number`);
- names of a process's place (``[Rank 0]``, ``rank=3``, ``DP=0|PP=0|TP=0``: :data:`.base.LABELS`) are labels,
  never metrics;
- rates, by the unit printed after the number, whether a name comes before it (``ips: 9.7 samples/s``: the unit
  wins over the name) or not (``| 640.0 samples/sec``): ``samples/s`` (``/sec``, ``/second``) -> ``samples_per_s``,
  ``tokens/s`` and ``tok/s`` -> ``tokens_per_s`` (a step column: the rate of the line), ``it/s``, ``iter/s``,
  ``steps/s`` -> ``steps_per_s``; the same rates written as names (``samples_per_sec=640``, ``tokens/s: 12000``,
  ``it/s 2.5``) map alike (:data:`.base.ALIASES`). ``s/it`` and other units stay as printed;
- any other name goes through :data:`.base.ALIASES` (``learning_rate`` -> ``lr``, ``gnorm`` -> ``grad_norm``...)
  and, when it has no column, to ``extra`` under its printed name.
"""

from __future__ import annotations

import re

from ledger.ingest.formats.base import BAD, LABELS, RATE_UNITS, TOTAL, Parsed, number, put

NAME = "key-value"
_SOURCE_EXT = r"(?:py|pyx|c|cc|cpp|cxx|cu|h|hpp|rs|go|java|scala|js|ts|jl|lua|sh)"
_VALUE = r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[kKMGTP]?|nan|inf"
_RATE = r"(samples?|tokens?|tok|it|iters?|steps?)\s*/\s*(?:second|sec|s)(?![\w/]|\s*[=:]|\s+[-+]?\.?\d)"
"""A rate's unit after its number (``9.7 samples/s``); not a rate's name before its own number (``it/s 2.5``, as
``it/s: 2.5``), or ``loss 1.5 it/s 2.5`` would read the loss as the rate."""
_PAIR = re.compile(
    r"(?:^|(?<=[\s|,;\[(]))"
    r"(?![\w./-]*\." + _SOURCE_EXT + r":\d)"  # not `train.py:212`: where a logging prefix says the line was logged
    r"([A-Za-z][\w./-]*)(\s*[=:]\s*|\s+)(" + _VALUE + r")"
    r"(?:\s*/\s*(\d[\d,]*))?"  # a counter's total: `iter 20/50`
    r"(?:\s*" + _RATE + r")?"  # a rate's unit: `ips: 9.7 samples/s`
    r"(?![\w.]|:\d)"
)
_ALONE = re.compile(r"(?:^|(?<=[\s|,;\[(]))(" + _VALUE + r")\s*" + _RATE)
"""A rate printed after its number without a name: ``| 640.0 samples/sec``, tqdm's ``1.96it/s``."""
_STEP_KEYS = frozenset({"step", "iter", "iteration", "global_step", "update", "it", "num_updates"})
_METRIC_NAMES = frozenset({"lr", "learning_rate", "grad_norm", "ppl", "perplexity"})
_EVAL = re.compile(r"^(val|valid|validation|eval|test)[_/](.+)$", re.I)
_SPLITS = {"val": "val", "valid": "val", "validation": "val", "eval": "eval", "test": "test"}


def parse_line(line: str) -> Parsed | None:
    """One generic step line, or None."""
    pairs = list(_PAIR.finditer(line))
    if len(pairs) < 2:
        return None
    step: int | None = None
    metrics: dict[str, float] = {}
    seen: dict[str, float] = {}
    evals: list[tuple[str | None, str, float]] = []
    training = False
    spaced = True
    for pair in pairs:
        key, sep, raw, total, unit = pair.groups()
        low = key.lower()
        if low in _STEP_KEYS and step is None:
            if not raw.replace(",", "").isdigit():
                return None
            step = int(raw.replace(",", ""))
            spaced = not sep.strip()
            if total is not None:
                metrics[TOTAL] = float(total.replace(",", ""))
            continue
        if step is not None and not spaced and not sep.strip():
            continue  # `step: 3 loss: 1.2 ... Tue Sep 17`: only pairs written like the step's count
        if low in LABELS:
            continue
        value = number(raw)
        if value is None:
            continue
        if unit is not None:
            key = low = RATE_UNITS[unit.lower()]
        if low in seen and seen[low] != value and not (value != value and seen[low] != seen[low]):
            return BAD if training or "loss" in low else None
        seen[low] = value
        if "loss" in low or low in _METRIC_NAMES:
            training = True
        m = _EVAL.match(key)
        if m:
            evals.append((_SPLITS[m.group(1).lower()], m.group(2), value))
        else:
            put(metrics, key, value)
    if step is None or not training:
        return None
    if "/" in line:
        _rates(line, pairs, metrics)
    return Parsed(step=step, metrics=metrics, evals=evals)


def _rates(line: str, pairs: list[re.Match[str]], metrics: dict[str, float]) -> None:
    """Rates printed after their number without a name (``| 640.0 samples/sec``), outside the pairs' text."""
    spans = [p.span() for p in pairs]
    for m in _ALONE.finditer(line):
        if any(a <= m.start() < b for a, b in spans):
            continue
        value = number(m.group(1))
        if value is not None:
            metrics.setdefault(RATE_UNITS[m.group(2).lower()], value)


__all__ = ["NAME", "parse_line"]

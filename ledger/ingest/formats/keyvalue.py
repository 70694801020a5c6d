"""Generic step lines: ``key=value``, ``key: value`` or ``key value`` pairs, e.g.::

    step 10 loss 2.345 lr 0.001
    step=10 loss=2.345 lr=1e-3 grad_norm=0.9
    Step 1: loss=10.2313

A line is a step only when it names the step (``step``, ``iter``, ``iteration``, ``global_step``,
``update``) with a whole number *and* gives at least one number under a training metric's name (a name
containing ``loss``, or ``lr`` / ``learning_rate`` / ``grad_norm`` / ``ppl`` / ``perplexity``). So
``saving checkpoint at step 1000``, ``Epoch 5/5`` or a progress bar are never steps. A line that gives the
same name twice with different values (``train loss 1.2, val loss 1.4``) is ambiguous: counted as unparsed,
never guessed. When the step is written ``step: N`` or ``step=N``, only pairs written with ``:`` or ``=``
count (so a date later in the line, ``Tue Sep 17``, is not a metric); ``step N`` accepts ``name value`` pairs.
Each name takes the first number after it. Names ``val_*``, ``valid_*``, ``eval_*``, ``test_*`` (or with ``/``)
are evals of that split at the line's step (``step 100 loss 2.1 val_loss 2.3``). A source file and its line
number, as a logging prefix writes them (``train.py:212]``, ``[trainer.cc:88]``), are not a metric.
"""

from __future__ import annotations

import re

from ledger.ingest.formats.base import BAD, Parsed, number, put

NAME = "key-value"
_SOURCE_EXT = r"(?:py|pyx|c|cc|cpp|cxx|cu|h|hpp|rs|go|java|scala|js|ts|jl|lua|sh)"
_PAIR = re.compile(
    r"(?:^|(?<=[\s|,;\[(]))"
    r"(?![\w./-]*\." + _SOURCE_EXT + r":\d)"  # not `train.py:212`: where a logging prefix says the line was logged
    r"([A-Za-z][\w./-]*)(\s*[=:]\s*|\s+)([-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)(?![\w.]|:\d)"
)
_STEP_KEYS = frozenset({"step", "iter", "iteration", "global_step", "update", "it"})
_METRIC_NAMES = frozenset({"lr", "learning_rate", "grad_norm", "ppl", "perplexity"})
_EVAL = re.compile(r"^(val|valid|validation|eval|test)[_/](.+)$", re.I)
_SPLITS = {"val": "val", "valid": "val", "validation": "val", "eval": "eval", "test": "test"}


def parse_line(line: str) -> Parsed | None:
    """One generic step line, or None."""
    pairs = _PAIR.findall(line)
    if len(pairs) < 2:
        return None
    step: int | None = None
    metrics: dict[str, float] = {}
    seen: dict[str, float] = {}
    evals: list[tuple[str | None, str, float]] = []
    training = False
    spaced = True
    for key, sep, raw in pairs:
        low = key.lower()
        if low in _STEP_KEYS and step is None:
            if not raw.replace(",", "").isdigit():
                return None
            step = int(raw.replace(",", ""))
            spaced = not sep.strip()
            continue
        if step is not None and not spaced and not sep.strip():
            continue  # `step: 3 loss: 1.2 ... Tue Sep 17`: only pairs written like the step's count
        value = number(raw)
        if value is None:
            continue
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
    return Parsed(step=step, metrics=metrics, evals=evals)


__all__ = ["NAME", "parse_line"]

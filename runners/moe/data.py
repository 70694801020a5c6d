"""Data: a bundled deterministic mixture-of-sources corpus, or any local text file read as bytes.

Legend: N sequences, S sequence length (inputs; every stored sequence has S + 1 tokens), B batch.

The synthetic corpus mixes structurally different sources over a 64-token vocabulary; every sequence
starts with its source's tag token and is evaluated per source:
    markov   a sparse first-order Markov chain (a fixed random transition table): statistics
    copy     blocks "x1..xm SEP x1..xm END": induction / copying
    reverse  blocks "x1..xm SEP xm..x1 END": position arithmetic
    arith    blocks "a + b = (a+b) mod 16 ;": the rare source (data.rare_fraction of the tokens, 2%)
Validation holds ``val_sequences`` sequences per source, so the rare source is measured as well as the
common ones; the overall val loss is the mixture-weighted mean of the per-source losses (the expected loss
on the training mixture).

The fingerprint is sha256 over the generator parameters (canonical JSON) and every generated array, or over
the parameters and the file's bytes: it changes exactly when the data does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runners.moe.configs import ConfigError, DataConfig

VOCAB = 64
SOURCES = ("markov", "copy", "reverse", "arith")
RARE = "arith"
SEP, PLUS, EQ, END = 4, 5, 6, 7
CONTENT0 = 8  # content tokens are 8..63
N_CONTENT = VOCAB - CONTENT0
MODULUS = 16
BRANCHING = 4
COMMON_WEIGHTS = {"markov": 0.5, "copy": 0.25, "reverse": 0.25}
GENERATOR_VERSION = 1


@dataclass
class Corpus:
    """Tokenised training and validation data plus what the receipt says about it."""

    name: str
    tokenizer: str
    vocab_size: int
    seq_len: int
    sources: tuple[str, ...]
    rare_source: str | None
    weights: dict[str, float]
    """Share of each source in the training mixture (weights of the overall val loss)."""
    train_NS: torch.Tensor
    """(N, S + 1) int64 training sequences."""
    train_source_N: torch.Tensor
    """Source index of each training sequence."""
    val: dict[str, torch.Tensor]
    """Source -> (n, S + 1) validation sequences."""
    fingerprint: str
    generator: dict[str, Any]
    paths: tuple[str, ...] = ()
    _perms: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def batch(
        self, step_index: int, batch_size: int, seed: int, rank: int = 0, world: int = 1
    ) -> torch.Tensor:
        """This rank's share (rows rank*B/W ... ) of global batch ``step_index`` (0-based): a pure function of
        (seed, step_index), so resuming needs only the step. Epochs are reshuffled with (seed, epoch)."""
        N = self.train_NS.shape[0]
        per_rank = batch_size // world
        first = step_index * batch_size + rank * per_rank
        positions = np.arange(first, first + per_rank)
        idx = np.empty(per_rank, dtype=np.int64)
        for epoch in np.unique(positions // N):
            mask = positions // N == epoch
            idx[mask] = self._perm(int(epoch), seed)[positions[mask] % N]
        return self.train_NS[torch.from_numpy(idx)]

    def _perm(self, epoch: int, seed: int) -> np.ndarray:
        if epoch not in self._perms:
            self._perms.clear()
            self._perms[epoch] = np.random.default_rng([seed, epoch]).permutation(self.train_NS.shape[0])
        return self._perms[epoch]


def load_corpus(cfg: DataConfig, seq_len: int) -> Corpus:
    """The configured corpus (the synthetic mixture, or ``cfg.path`` as bytes)."""
    if cfg.path:
        return _byte_corpus(Path(cfg.path), cfg, seq_len)
    return _synthetic_corpus(cfg.seed, seq_len, cfg.train_sequences, cfg.val_sequences, cfg.rare_fraction)


def check_data_path(cfg: DataConfig, seq_len: int) -> None:
    """Raise ConfigError now (before training) when data.path cannot be used."""
    if not cfg.path:
        return
    p = Path(cfg.path)
    if not p.is_file():
        raise ConfigError(f"data.path {cfg.path!r} is not a readable file")
    need = 2 * (seq_len + 1)
    if p.stat().st_size < need:
        raise ConfigError(
            f"data.path {cfg.path!r} has {p.stat().st_size} bytes; need at least {need} "
            f"(two sequences of model.seq_len + 1)"
        )


# ------------------------------------------------------------------------------------------- synthetic
def mixture_weights(rare_fraction: float) -> dict[str, float]:
    w = {s: v * (1 - rare_fraction) for s, v in COMMON_WEIGHTS.items()}
    w[RARE] = rare_fraction
    return w


@lru_cache(maxsize=4)
def _synthetic_corpus(seed: int, seq_len: int, n_train: int, n_val: int, rare_fraction: float) -> Corpus:
    weights = mixture_weights(rare_fraction)
    params = {
        "name": "mixture-of-sources",
        "version": GENERATOR_VERSION,
        "seed": seed,
        "vocab_size": VOCAB,
        "seq_len": seq_len,
        "train_sequences": n_train,
        "val_sequences_per_source": n_val,
        "weights": weights,
        "rare_source": RARE,
        "markov_branching": BRANCHING,
        "modulus": MODULUS,
    }
    rng = np.random.default_rng(seed)
    cdf_VV = _markov_table(rng)
    counts = {s: round(weights[s] * n_train) for s in SOURCES}
    counts[RARE] = max(1, counts[RARE])
    counts["markov"] += n_train - sum(counts.values())
    parts, labels = [], []
    for i, s in enumerate(SOURCES):
        parts.append(_generate(s, rng, counts[s], seq_len, cdf_VV))
        labels.append(np.full(counts[s], i, dtype=np.int64))
    order = rng.permutation(n_train)
    train = np.concatenate(parts)[order]
    source = np.concatenate(labels)[order]
    val = {s: _generate(s, rng, n_val, seq_len, cdf_VV) for s in SOURCES}

    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for arr in (train, source, *val.values()):
        h.update(arr.astype("<i2").tobytes())
    return Corpus(
        name="mixture-of-sources",
        tokenizer=f"synthetic-v{GENERATOR_VERSION}",
        vocab_size=VOCAB,
        seq_len=seq_len,
        sources=SOURCES,
        rare_source=RARE,
        weights=weights,
        train_NS=torch.from_numpy(train),
        train_source_N=torch.from_numpy(source),
        val={s: torch.from_numpy(v) for s, v in val.items()},
        fingerprint=h.hexdigest(),
        generator=params,
    )


def _markov_table(rng: np.random.Generator) -> np.ndarray:
    probs = np.full((N_CONTENT, N_CONTENT), 0.05 / N_CONTENT)
    for state in range(N_CONTENT):
        succ = rng.choice(N_CONTENT, size=BRANCHING, replace=False)
        probs[state, succ] += 0.95 * rng.dirichlet(np.ones(BRANCHING))
    return np.cumsum(probs / probs.sum(1, keepdims=True), axis=1)


def _generate(source: str, rng: np.random.Generator, n: int, seq_len: int, cdf_VV: np.ndarray) -> np.ndarray:
    """n sequences of seq_len + 1 tokens: the source's tag, then seq_len body tokens."""
    S = seq_len
    j_S = np.arange(S)[None, :]
    if source == "markov":
        body = np.empty((n, S), dtype=np.int64)
        state = rng.integers(0, N_CONTENT, size=n)
        u = rng.random((n, S))
        for t in range(S):  # vectorised over sequences
            body[:, t] = state
            nxt = (u[:, t : t + 1] > cdf_VV[state]).sum(1)
            state = np.minimum(nxt, N_CONTENT - 1)
        body += CONTENT0
    elif source in ("copy", "reverse"):
        m_N1 = rng.integers(3, 9, size=(n, 1))
        block = 2 * m_N1 + 2
        b, o = j_S // block, j_S % block
        rand = rng.integers(0, N_CONTENT, size=(n, S // 8 + 1, 8)) + CONTENT0
        if source == "copy":
            pos = np.where(o < m_N1, o, o - m_N1 - 1)
        else:
            pos = np.where(o < m_N1, o, 2 * m_N1 - o)
        pos = np.clip(pos, 0, m_N1 - 1)
        body = np.take_along_axis(rand.reshape(n, -1), b * 8 + pos, axis=1)
        body = np.where(o == m_N1, SEP, np.where(o == 2 * m_N1 + 1, END, body))
    elif source == "arith":
        nb = S // 6 + 1
        a, c = rng.integers(0, MODULUS, size=(2, n, nb))
        blocks = np.stack(
            [
                a + CONTENT0,
                np.full_like(a, PLUS),
                c + CONTENT0,
                np.full_like(a, EQ),
                (a + c) % MODULUS + CONTENT0,
                np.full_like(a, END),
            ],
            axis=-1,
        )
        body = blocks.reshape(n, -1)[:, :S]
    else:  # pragma: no cover - SOURCES is closed
        raise ValueError(source)
    tag = np.full((n, 1), SOURCES.index(source), dtype=np.int64)
    return np.concatenate([tag, body.astype(np.int64)], axis=1)


# ----------------------------------------------------------------------------------------------- bytes
def _byte_corpus(path: Path, cfg: DataConfig, seq_len: int) -> Corpus:
    raw = path.read_bytes()
    tokens = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
    n = len(tokens) // (seq_len + 1)
    if n < 2:
        raise ConfigError(f"data.path {str(path)!r} is too short for model.seq_len={seq_len}")
    seqs = tokens[: n * (seq_len + 1)].reshape(n, seq_len + 1)
    n_val = max(1, min(cfg.val_sequences, n // 10))
    params = {
        "name": "bytes",
        "version": 1,
        "seq_len": seq_len,
        "val_sequences": n_val,
        "file_bytes": len(raw),
    }
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    h.update(raw)
    return Corpus(
        name=path.name,
        tokenizer="bytes",
        vocab_size=256,
        seq_len=seq_len,
        sources=("text",),
        rare_source=None,
        weights={"text": 1.0},
        train_NS=torch.from_numpy(seqs[:-n_val].copy()),
        train_source_N=torch.zeros(n - n_val, dtype=torch.int64),
        val={"text": torch.from_numpy(seqs[-n_val:].copy())},
        fingerprint=h.hexdigest(),
        generator=params,
        paths=(str(path.resolve()),),
    )

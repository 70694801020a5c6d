"""A launch's own configuration, without knowing what it means: the command line parsed into a flat
``{"key": "value"}`` and the config files it names, read with real parsers and flattened.

What is read, from ``python train.py --lr 3e-3 --warmup=100 --bf16 train.yaml model.layers=4``:

* the launcher and interpreter are skipped: everything up to the script (the first ``*.py``/``*.sh``
  argument, or the module of ``python -m``; ``torchrun``/``accelerate launch``/``deepspeed``/``python -m
  torch.distributed.run`` options come before it and are not the training's arguments);
* ``--key value`` and ``--key=value`` (numbers after the first value are kept with it, space separated:
  ``--betas 0.9 0.95``; a word after the value is positional), ``-k value``, ``--flag`` alone (``true``),
  Hydra overrides ``key=value``, ``+key=value``, ``++key=value`` (the ``+`` dropped) and ``~key``
  (``<deleted>``); other words are positional, ``arg1``, ``arg2``...; a later value of the same key
  replaces an earlier one (argparse's rule);
* every argument that names an existing file (relative to the launch's directory) ending in ``.yaml``,
  ``.yml``, ``.json`` or ``.toml`` (at most :data:`MAX_FILE_BYTES`) is parsed (PyYAML, json, tomllib) and
  its keys flattened as ``<file as given>:a.b`` (lists as JSON); every named config-like file (those and
  ``.py``, ``.cfg``, ``.ini``, ``.conf``) also gets ``<file>:@sha256``, the digest of its bytes. Hydra's
  ``--config-path``/``--config-name`` name a file the same way.

Every value passes the launch's :class:`~ledger.redact.Redactor`; a value under a secret-looking key
(``--hf_token``, ``wandb.api_key``) is replaced by ``<redacted>``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.redact import REDACTED, Redactor, secret_value
from ledger.store.layout import ARGUMENTS_FILE, CAPTURE_FILE
from ledger.store.staging import add_problems, write_json_atomic

MAX_FILE_BYTES = 1 << 20
MAX_KEYS = 5000
MAX_VALUE = 2000
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
DIGEST_SUFFIXES = (*CONFIG_SUFFIXES, ".py", ".cfg", ".ini", ".conf")
SCRIPT_SUFFIXES = (".py", ".sh")
LAUNCHER_MODULES = frozenset({
    "torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch", "deepspeed.launcher.runner",
    "torchrun", "accelerate", "deepspeed",
})
_PYTHON = re.compile(r"^(?:.*/)?python(?:\d+(?:\.\d+)*)?$")
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_HYDRA = re.compile(r"^(\+{0,2})([A-Za-z_][\w.\-/@]*)=(.*)$", re.S)


@dataclass
class Arguments:
    """The flat configuration and where it came from."""

    values: dict[str, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    """``argv`` and each config file read, as named on the command line."""
    notes: list[str] = field(default_factory=list)


def script_arguments(command: Sequence[str]) -> list[str]:
    """The arguments of the training script itself (launcher and interpreter tokens dropped)."""
    tokens = list(command)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "-m" and i + 1 < len(tokens):
            module = tokens[i + 1]
            if module in LAUNCHER_MODULES:
                i += 2
                continue
            return tokens[i + 2:]
        if tok.endswith(SCRIPT_SUFFIXES) and not tok.startswith("-"):
            return tokens[i + 1:]
        i += 1
    if tokens and not _PYTHON.match(Path(tokens[0]).name) and Path(tokens[0]).name not in LAUNCHER_MODULES:
        return tokens[1:]  # a program of its own: ./train --lr 3e-3
    return []


def _is_option(tok: str) -> bool:
    return tok.startswith("-") and len(tok) > 1 and not _NUMBER.match(tok)


def parse_argv(args: Sequence[str]) -> list[tuple[str, str]]:
    """(key, value) pairs in order, as the module docstring describes."""
    out: list[tuple[str, str]] = []
    positional = 0
    i = 0
    n = len(args)
    while i < n:
        tok = args[i]
        i += 1
        if tok == "--":
            continue
        if _is_option(tok):
            key = tok.lstrip("-")
            if "=" in key:
                key, value = key.split("=", 1)
                out.append((key, value))
                continue
            values: list[str] = []
            while i < n and not _is_option(args[i]) and not _HYDRA.match(args[i]) and (
                    not values or _NUMBER.match(args[i])):
                values.append(args[i])
                i += 1
            out.append((key, " ".join(values) if values else "true"))
            continue
        m = _HYDRA.match(tok)
        if m:
            out.append((m.group(2), m.group(3)))
        elif tok.startswith("~") and len(tok) > 1:
            out.append((tok[1:], "<deleted>"))
        else:
            positional += 1
            out.append((f"arg{positional}", tok))
    return out


def _flatten(data: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(data, dict) and data:
        for k, v in data.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix or "value"] = _text(data)


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, int | float):
        return repr(v)
    try:
        return json.dumps(v, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(v)


def read_config(path: Path) -> Any:
    """A YAML, JSON or TOML file as data (raises ValueError with the parser's message)."""
    text = path.read_text(errors="replace")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return json.loads(text)
    if suffix == ".toml":
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(str(exc)) from exc
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ValueError(str(exc).replace("\n", " ")) from exc
    return docs[0] if len(docs) == 1 else docs


def _file(value: str, cwd: Path) -> Path | None:
    if not value.endswith(DIGEST_SUFFIXES) or len(value) > 4096:
        return None
    path = Path(value) if Path(value).is_absolute() else cwd / value
    try:
        return path if path.is_file() else None
    except OSError:
        return None


def capture_arguments(command: Sequence[str], cwd: Path, redactor: Redactor) -> Arguments:
    """The launch's configuration from its command line and the config files it names."""
    result = Arguments()
    pairs = parse_argv(script_arguments(redactor.argv(list(command))))
    flat: dict[str, str] = {}
    if pairs:
        result.sources.append("argv")
    files: list[str] = []
    for key, value in pairs:
        flat[key] = value
        for word in value.split(" ") if " " in value else (value,):
            if _file(word, cwd) is not None and word not in files:
                files.append(word)
    hydra_dir = flat.get("config-path") or flat.get("config_path")
    hydra_name = flat.get("config-name") or flat.get("config_name")
    if hydra_name:
        name = hydra_name if hydra_name.endswith((".yaml", ".yml")) else hydra_name + ".yaml"
        candidate = str(Path(hydra_dir or ".") / name)
        if _file(candidate, cwd) is not None and candidate not in files:
            files.append(candidate)
    for name in files:
        path = _file(name, cwd)
        assert path is not None
        try:
            flat[f"{name}:@sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            result.notes.append(f"{name}: not read ({exc.strerror or exc})")
            continue
        if not name.endswith(CONFIG_SUFFIXES):
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            result.notes.append(f"{name}: larger than {MAX_FILE_BYTES} bytes; only its digest is kept")
            continue
        try:
            data = read_config(path)
        except (ValueError, OSError) as exc:
            result.notes.append(f"{name}: could not be parsed ({exc}); only its digest is kept")
            continue
        keys: dict[str, str] = {}
        _flatten(data, "", keys)
        flat.update({f"{name}:{k}": v for k, v in keys.items()})
        result.sources.append(name)
    for key, value in list(flat.items())[:MAX_KEYS]:
        last = re.split(r"[.:]", key)[-1]
        if secret_value(last, value) or secret_value(key, value):
            clean = REDACTED
        else:
            clean = redactor.text(value)
        if len(clean) > MAX_VALUE:
            clean = clean[:MAX_VALUE] + "..."
        result.values[redactor.text(key)] = clean
    if len(flat) > MAX_KEYS:
        result.notes.append(f"{len(flat)} configuration keys; the first {MAX_KEYS} are kept")
    return result


def stage_arguments(run_dir: Path, command: Sequence[str], cwd: Path, redactor: Redactor) -> None:
    """Write ``arguments.json`` (the launch's configuration, redacted) and the config part of ``capture.json``
    into a live run's staging directory (`ledger record`, before its launch starts)."""
    try:
        args = capture_arguments(command, cwd, redactor)
        if args.values:
            write_json_atomic(run_dir / ARGUMENTS_FILE, args.values)
        write_json_atomic(run_dir / CAPTURE_FILE, {"config_keys": len(args.values),
                                                   "config_sources": args.sources})
        add_problems(run_dir, [("arguments", n) for n in args.notes])
    except Exception as exc:  # capture never fails the run
        try:
            add_problems(run_dir, [("arguments", f"configuration capture failed: {type(exc).__name__}: {exc}")])
        except OSError:
            pass


__all__ = ["Arguments", "capture_arguments", "parse_argv", "read_config", "script_arguments", "stage_arguments"]

"""Secrets planted in the environment, argv, a git remote and the training output reach no file under the
ledger directory (raw bytes, decompressed Parquet and the index's contents are all searched)."""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
from helpers import ids_in, load_receipt


def _all_text_under(ledger_dir: Path, ledger_cli) -> str:
    chunks = []
    for path in ledger_dir.rglob("*"):
        if path.is_file():
            chunks.append(path.read_bytes().decode("latin-1"))
            if path.suffix == ".parquet":
                chunks.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
    for table in ("receipts", "steps", "evals", "events", "timing", "routing", "telemetry"):
        chunks.append(ledger_cli("query", "--json", f"SELECT * FROM {table}").stdout)
    return "\n".join(chunks)


def test_planted_secrets_are_never_stored(ledger_cli, ledger_dir, workload, tmp_path) -> None:
    hf = "hf_" + secrets.token_hex(17)
    wandb = secrets.token_hex(20)
    password = "pw-" + secrets.token_urlsafe(12)
    aws = "AKIA" + secrets.token_hex(8).upper()
    argv_token = "tok-" + secrets.token_urlsafe(16)
    url_pass = "up-" + secrets.token_urlsafe(10)
    git_token = "ghp_" + secrets.token_hex(18)
    config_key = "ck-" + secrets.token_urlsafe(14)
    data_pass = "dp-" + secrets.token_urlsafe(10)
    planted = [hf, wandb, password, aws, argv_token, url_pass, git_token, config_key, data_pass]
    config = tmp_path / "config.yaml"
    config.write_text(f"model: moe\napi_key: {config_key}\ndata: https://loader:{data_pass}@data.example/shards\n")

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin",
                    f"https://user:{git_token}@github.com/acme/train.git"], check=True)
    script = workload(
        f"""
import os
print("env token", os.environ["HF_TOKEN"], os.environ["WANDB_API_KEY"], flush=True)
print("argv", sys.argv[1:], flush=True)
print("WANDB_API_KEY={wandb}", file=sys.stderr, flush=True)
run.event("login", token=os.environ["MY_SERVICE_PASSWORD"])
config = open({str(config)!r}).read()
print(config, flush=True)
run.set_workload({{"data": {{"paths": [config.splitlines()[2].split(": ", 1)[1]]}}}})
""",
        steps=3,
    )
    proc = ledger_cli(
        "record", "--env", "MY_SERVICE_PASSWORD", "--", "python", str(script),
        "--hf-token", argv_token, f"--data=https://me:{url_pass}@data.example/x", f"--key={aws}",
        env={"HF_TOKEN": hf, "WANDB_API_KEY": wandb, "MY_SERVICE_PASSWORD": password,
             "AWS_ACCESS_KEY_ID": aws, "NCCL_DEBUG": "INFO", "TORCH_LOGS": "dynamo"},
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr
    assert hf in proc.stdout  # the terminal sees the child's output unchanged
    text = _all_text_under(ledger_dir, ledger_cli)
    for value in planted:
        assert value not in text, f"planted secret {value[:6]}... found under the ledger directory"
    r = load_receipt(ledger_dir, ids_in(ledger_dir)[0])
    env = r["stack"]["environment"]
    assert env["NCCL_DEBUG"] == "INFO" and env["TORCH_LOGS"] == "dynamo"
    assert env["MY_SERVICE_PASSWORD"] == "<redacted>" and "HF_TOKEN" not in env
    assert r["stack"]["code"]["remote"] == "https://github.com/acme/train.git"
    assert "<redacted>" in " ".join(r["command"])
    assert "<redacted>" in (ledger_dir / r["id"] / "output.log").read_text()
    assert r["workload"]["data"]["paths"] == ["https://<redacted>@data.example/shards"]

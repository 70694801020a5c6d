"""Secrets planted in the environment, argv, a git remote and the training output reach no file under the
ledger directory (raw bytes, decompressed Parquet, decoded Arrow streams and the index's contents are all searched)."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
from helpers import ids_in, load_receipt, receipt_dir


def _all_text_under(ledger_dir: Path, ledger_cli) -> str:
    chunks = []
    for path in ledger_dir.rglob("*"):
        if path.is_file():
            chunks.append(path.read_bytes().decode("latin-1"))
            if path.suffix == ".parquet":
                chunks.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
            if path.suffix == ".arrows":  # staged streams are compressed: their raw bytes hide what they hold
                with pa.OSFile(str(path), "rb") as f:
                    chunks.append(json.dumps(pa.ipc.open_stream(f).read_all().to_pylist(), default=str))
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
    assert "<redacted>" in (receipt_dir(ledger_dir, r["id"]) / "output.log").read_text()
    assert r["workload"]["data"]["paths"] == ["https://<redacted>@data.example/shards"]


_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_DIGITS = "0123456789"


def _b64(n: int) -> str:
    """n random characters of a token alphabet (letters and digits)."""
    return "".join(secrets.choice(_LETTERS + _DIGITS) for _ in range(n))


def _random_looking(n: int) -> str:
    """A token that is random-looking by detect-secrets' definition whatever the draw (``n`` <= 62): ``n``
    distinct letters and digits, at least one of each. ``n`` distinct characters carry log2(n) bits each (5.3
    for 40, over the 4.5 limit); ``n`` draws with repeats (:func:`_b64`) fall under the limit now and then (510 of
    20,000 draws of 40), and such a token is rightly not a secret to the entropy rule."""
    rng = secrets.SystemRandom()
    digit, letter = rng.choice(_DIGITS), rng.choice(_LETTERS)
    chars = [digit, letter, *rng.sample([c for c in _LETTERS + _DIGITS if c not in (digit, letter)], n - 2)]
    rng.shuffle(chars)
    return "".join(chars)


def _pem(kind: str) -> tuple[str, list[str]]:
    """A PEM-armoured private key block of random body lines, and the body lines (each a planted secret)."""
    body = [_b64(64) for _ in range(4)]
    return f"-----BEGIN {kind}-----\n" + "\n".join(body) + f"\n-----END {kind}-----\n", body


def test_seventy_planted_kinds_are_never_stored(ledger_cli, ledger_dir, workload, tmp_path) -> None:
    """Each kind of secret planted once, through every way into the ledger: argv, environment, --name,
    --tag, stdout and stderr (single lines and multi-line blocks written at once), SDK strings and metric names,
    the workload and config files. Not one of the planted values may appear in any byte under the ledger.
    Issue 34 added the eight after ``seed_secret``: a JWT's signature with no "token" word near, Megatron's
    dotted argument lines, an SDK metric name that is a token (its name was kept in receipt.json's capture
    sentence), presigned S3 URLs on argv and in the workload's data paths, an Azure SAS and a GCS signed URL
    printed."""
    s = {k: _b64(24) for k in (
        "hf_flag", "db_pass_flag", "password_eq", "api_key_flag", "secret_flag", "auth_token_eq", "curl_user",
        "env_password", "env_db_pass", "env_nccl_auth", "url_argv", "pass_json", "db_pass_yaml", "mysql",
        "curl_out", "bearer", "password_out", "wandb_err", "api_key_err", "event_token", "event_detail",
        "eval_source", "workload_token", "workload_api_key", "config_yaml", "config_json", "config_env",
        "tag_api_key", "url_out", "stdout_flag")}
    s |= {
        "aws_argv": "AKIA" + _b64(16).upper(),
        "entropy_argv": _random_looking(40),
        "hf_env": "hf_" + _b64(34),
        "wandb_env": secrets.token_hex(20),
        "aws_secret_env": _b64(40),
        "gh_env": "ghp_" + _b64(36),
        "openai_env": "sk-proj-" + _b64(40),
        "name_glpat": "glpat-" + _b64(20),
        "tag_jwt": "eyJ" + _b64(20) + "." + "eyJ" + _b64(30) + "." + _b64(43),
        "tag_entropy": _random_looking(40),
        "jwt": "eyJhbGciOiJIUzI1NiJ9." + "eyJ" + _b64(40) + "." + _b64(43),
        "glpat": "glpat-" + _b64(20),
        "aiza": "AIza" + _b64(35),
        "stripe": "sk_live_" + _b64(24),
        "stripe_rk": "rk_live_" + _b64(24),
        "gh_out": "ghp_" + _b64(36),
        "github_pat": "github_pat_" + _b64(40),
        "slack": "xoxb-" + "".join(secrets.choice("0123456789") for _ in range(11)) + "-" + _b64(24).lower(),
        "sendgrid": "SG." + _b64(22) + "." + _b64(43),
        "aws_out": "AKIA" + _b64(16).upper(),
        "slack_hook": "https://hooks.slack.com/services/T" + _b64(8) + "/B" + _b64(8) + "/" + _b64(24),
        "npm": "npm_" + _b64(36),
        "pypi": "pypi-AgEIcHlwaS5vcmc" + _b64(80),
        "twilio": "SK" + secrets.token_hex(16),
        "telegram": "".join(secrets.choice("0123456789") for _ in range(9)) + ":" + _b64(35),
        "hf_out": "hf_" + _b64(34),
        "openai_out": "sk-" + _b64(48),
        "eval_gh": "ghp_" + _b64(36),
        "timing_aiza": "AIza" + _b64(35),
        "overrides_secret": _b64(20),
        "seed_secret": str(secrets.randbelow(10**9) + 10**9),
        "jwt_signature": _b64(43),
        "megatron_wandb": secrets.token_hex(20),
        "megatron_password": _b64(24),
        "metric_name": "hf_" + _b64(34),
        "presigned_argv": secrets.token_hex(32),
        "presigned_workload": secrets.token_hex(32),
        "azure_sas": quote(base64.b64encode(secrets.token_bytes(32)).decode(), safe=""),
        "gcs_signature": secrets.token_hex(128),
    }
    jwt_bare = "eyJ" + _b64(30) + "." + "eyJ" + _b64(60) + "." + s["jwt_signature"]

    def presigned(signature: str) -> str:
        return ("https://bkt.s3.amazonaws.com/shards/0.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
                f"AKIA{_b64(16).upper()}%2F20261201%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261201T000000Z"
                f"&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature={signature}")

    sas_url = ("https://acct.blob.core.windows.net/data/shard.bin?sv=2022-11-02&ss=b&srt=o&sp=r"
               f"&se=2026-12-31T00%3A00%3A00Z&spr=https&sig={s['azure_sas']}")
    gcs_url = ("https://storage.googleapis.com/bkt/shard.bin?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential="
               "loader%40proj.iam.gserviceaccount.com%2F20261201%2Fauto%2Fstorage%2Fgoog4_request&X-Goog-Date="
               f"20261201T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host&X-Goog-Signature={s['gcs_signature']}")
    kinds = len(s) + 3  # and three PEM blocks, each of four body lines
    pem_rsa, rsa_body = _pem("RSA PRIVATE KEY")
    pem_ssh, ssh_body = _pem("OPENSSH PRIVATE KEY")
    pem_pgp, pgp_body = _pem("PGP PRIVATE KEY BLOCK")
    planted = dict(s) | {f"pem_rsa_{i}": v for i, v in enumerate(rsa_body)} | {
        f"pem_ssh_{i}": v for i, v in enumerate(ssh_body)} | {f"pem_pgp_{i}": v for i, v in enumerate(pgp_body)}
    config = tmp_path / "train.yaml"
    config.write_text(f"model: moe\ndb_password: {s['config_yaml']}\n")
    config_json = tmp_path / "train.json"
    config_json.write_text(json.dumps({"lr": 0.1, "pass": s["config_json"]}))
    dotenv = tmp_path / "train.env"
    dotenv.write_text(f"export API_TOKEN={s['config_env']}\n")
    script = workload(
        f"""
import json, os
S = json.loads({json.dumps(json.dumps(s))})
out, err = sys.stdout, sys.stderr
print("argv", sys.argv[1:], flush=True)
print("env", os.environ["HF_TOKEN"], os.environ["WANDB_API_KEY"], os.environ["GITHUB_TOKEN"], flush=True)
for key in ("jwt", "glpat", "aiza", "stripe", "stripe_rk", "gh_out", "github_pat", "slack", "sendgrid",
            "aws_out", "slack_hook", "twilio", "hf_out", "openai_out"):
    print(f"found {{key}}: {{S[key]}} in the cache", flush=True)
print("npm config //registry.npmjs.org/:_authToken=" + S["npm"], flush=True)
print("twine upload -p " + S["pypi"], flush=True)
print("telegram bot" + S["telegram"] + "/sendMessage", flush=True)
print("connecting with --db-pass " + S["stdout_flag"], flush=True)
print(json.dumps({{"user": "a", "pass": S["pass_json"]}}), flush=True)
print("db_pass: " + S["db_pass_yaml"], flush=True)
print("mysql -uroot -p" + S["mysql"] + " -h db", flush=True)
print("curl -u admin:" + S["curl_out"] + " https://api.example", flush=True)
print("Authorization: Bearer " + S["bearer"], flush=True)
print("password=" + S["password_out"], flush=True)
print("fetching https://svc:" + S["url_out"] + "@data.example/x", flush=True)
print("WANDB_API_KEY=" + S["wandb_err"], file=err, flush=True)
print("api_key: " + S["api_key_err"], file=err, flush=True)
out.write({pem_rsa!r}); out.flush()
for line in {pem_ssh!r}.splitlines(keepends=True):
    out.write(line); out.flush()
err.write({pem_pgp!r}); err.flush()
for path in sys.argv[-3:]:
    print(open(path).read(), flush=True)
run.event("login", token=S["event_token"])
run.event("connect", detail="Authorization: Bearer " + S["event_detail"])
run.log_eval(1, 0.5, metric="loss", source="https://u:" + S["eval_source"] + "@h/x")
run.log_eval(2, 0.5, metric="loss", source=S["eval_gh"])
run.log_timing(1, "fetch " + S["timing_aiza"], 0.1)
run.set_workload({{"seed": 7, "arguments": {{"seed_secret": S["seed_secret"], "hf_token": S["workload_token"],
                  "api_key": S["workload_api_key"]}},
                  "launch": {{"overrides": ["seed_secret=" + S["overrides_secret"]]}},
                  "data": {{"paths": [{presigned(s["presigned_workload"])!r}]}}}})
print("session {jwt_bare} opened", flush=True)
print("  wandb_api_key " + "." * 35 + " " + S["megatron_wandb"], flush=True)
print("  db_password " + "." * 37 + " " + S["megatron_password"], flush=True)
print("downloading {sas_url}", flush=True)
print("fetching {gcs_url}", file=err, flush=True)
run.log_step(3, loss=0.5, **{{S["metric_name"]: 1.0}})
""",
        steps=2,
    )
    proc = ledger_cli(
        "record", "--name", f"run-{s['name_glpat']}", "--tag", f"api_key={s['tag_api_key']}",
        "--tag", f"note={s['tag_jwt']}", "--tag", f"blob={s['tag_entropy']}",
        "--env", "MY_SERVICE_PASSWORD", "--env", "DB_PASS", "--",
        "python", str(script),
        "--hf-token", s["hf_flag"], "--db-pass", s["db_pass_flag"], f"--password={s['password_eq']}",
        "--api-key", s["api_key_flag"], "--secret", s["secret_flag"], f"--auth-token={s['auth_token_eq']}",
        "-u", f"admin:{s['curl_user']}", f"--data=https://me:{s['url_argv']}@data.example/x",
        f"--key={s['aws_argv']}", s["entropy_argv"], presigned(s["presigned_argv"]),
        str(config), str(config_json), str(dotenv),
        env={"HF_TOKEN": s["hf_env"], "WANDB_API_KEY": s["wandb_env"], "MY_SERVICE_PASSWORD": s["env_password"],
             "DB_PASS": s["env_db_pass"], "NCCL_AUTH_TOKEN": s["env_nccl_auth"],
             "AWS_SECRET_ACCESS_KEY": s["aws_secret_env"], "GITHUB_TOKEN": s["gh_env"],
             "OPENAI_API_KEY": s["openai_env"], "NCCL_DEBUG": "INFO"},
    )
    assert proc.returncode == 0, proc.stderr
    assert s["jwt"] in proc.stdout  # the terminal sees the child's output unchanged
    text = _all_text_under(ledger_dir, ledger_cli)
    assert kinds >= 70 and len(planted) >= 80
    leaked = sorted(kind for kind, value in planted.items() if value in text)
    assert leaked == [], f"{len(leaked)} of {len(planted)} planted secrets stored: {leaked}"
    r = load_receipt(ledger_dir, ids_in(ledger_dir)[0])
    assert r["stack"]["environment"]["NCCL_DEBUG"] == "INFO"
    assert r["summary"]["steps"] == 3  # the run itself is intact
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in " ".join(r["command"])  # the URL is kept, its signature not

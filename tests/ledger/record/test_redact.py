"""Secrets never survive redaction: environment allow-list, free text, argv and URLs."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.redact import REDACTED, Redactor, looks_secret, secret_value

GIT_SHA = "0123456789abcdef0123456789abcdef01234567"
WANDB_KEY = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("WANDB_API_KEY", True), ("APIKEY", True),
        ("apiKey", True), ("AWS_SECRET_ACCESS_KEY", True), ("AWS_ACCESS_KEY_ID", True), ("MY_SECRET", True),
        ("PGPASSWORD", True), ("DB_PASSWD", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("GH_AUTH", True), ("Authorization", True), ("SESSION_COOKIE", True), ("--hf-token", True),
        ("--wandb-key", True), ("KEYBOARD_LAYOUT", True),
        ("KMP_AFFINITY", False), ("NCCL_IB_HCA", False), ("GIT_AUTHOR_NAME", False), ("XAUTHORITY", False),
        ("MAX_TOKENS", False), ("TOKENIZERS_PARALLELISM", False), ("--tokenizer-model", False),
        ("--num-key-value-heads", False), ("--apply-query-key-layer-scaling", False),
        ("--moe-token-dispatcher-type", False), ("--moe-token-drop-policy", False),
        ("--moe-router-topk", False), ("CUDA_VISIBLE_DEVICES", False),
    ],
)
def test_looks_secret(name: str, secret: bool) -> None:
    assert looks_secret(name) is secret


def test_numbers_after_key_or_token_names_are_sizes_but_never_after_passwords() -> None:
    assert not secret_value("--kv-key-heads", "8")
    assert not secret_value("--api-key", "8")
    assert secret_value("--api-key", "8a7f")
    assert secret_value("--password", "1234")
    assert not secret_value("--seq-length", "abc")


def test_environment_keeps_only_the_allow_list_and_redacts_secrets() -> None:
    env = {
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "KMP_AFFINITY": "granularity=fine,compact",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "MASTER_ADDR": "node-001",
        "PYTHONHASHSEED": "0",
        "NCCL_AUTH_TOKEN": "whatever-value",
        "NCCL_SOCKET_IFNAME": "AKIAABCDEFGHIJKLMNOP",
        "TORCH_HOME": "/cache/hf_abcdefghijklmnopqrstuvwxyz0123",
        "HOME": "/root",
        "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123",
        "PATH": "/usr/bin",
        "MY_FLAG": "on",
        "TEAM_X": "1",
        "TEAM_Y": "2",
        "NCCL_EMPTY": "",
    }
    kept = Redactor(env, extra_env=["MY_FLAG", "TEAM_*"]).environment()
    assert kept == {
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "KMP_AFFINITY": "granularity=fine,compact",
        "MASTER_ADDR": "node-001",
        "MY_FLAG": "on",
        "NCCL_AUTH_TOKEN": REDACTED,
        "NCCL_EMPTY": "",
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "NCCL_SOCKET_IFNAME": REDACTED,
        "PYTHONHASHSEED": "0",
        "TEAM_X": "1",
        "TEAM_Y": "2",
        "TORCH_HOME": REDACTED,
    }
    assert list(kept) == sorted(kept)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("clone https://alice:s3cret@github.com/a/b.git", f"clone https://{REDACTED}@github.com/a/b.git"),
        ("https://alice:p@ss@host.org/x", f"https://{REDACTED}@host.org/x"),
        ("s3://bucket/path@v1 and http://localhost:8080/a", "s3://bucket/path@v1 and http://localhost:8080/a"),
        ("id AKIAABCDEFGHIJKLMNOP ok", f"id {REDACTED} ok"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCY", f"aws_secret_access_key = {REDACTED}"),
        ("token hf_abcdefghijklmnopqrstuvwxyz01234 used", f"token {REDACTED} used"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789 gho_abcdefghijklmnopqrstuvwxyz0123456789",
         f"{REDACTED} {REDACTED}"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", REDACTED),
        ("key sk-ant-api03-abcdefghijklmnopqrstuvwxyz", f"key {REDACTED}"),
        ("xoxb-123456789012-abcdefghij", REDACTED),
        (f"wandb login --relogin {WANDB_KEY}", f"wandb login --relogin {REDACTED}"),
        (f"WANDB_API_KEY={WANDB_KEY} python train.py", f"WANDB_API_KEY={REDACTED} python train.py"),
        (f"HEAD is now at {GIT_SHA} fix router", f"HEAD is now at {GIT_SHA} fix router"),
        ("Authorization: Bearer eyJhbGciOi.abc.def", f"Authorization: Bearer {REDACTED}"),
        ("curl -H 'Authorization: token abc123'", f"curl -H 'Authorization: token {REDACTED}'"),
        ("using bearer abcdefghijklmnop", f"using bearer {REDACTED}"),
        ("DB_PASSWORD=hunter2 next", f"DB_PASSWORD={REDACTED} next"),
        ('{"api_key": "abc", "num_keys": 3, "max_tokens": 4096}',
         f'{{"api_key": "{REDACTED}", "num_keys": 3, "max_tokens": 4096}}'),
        ("https://host/x?token=abc&page=2", f"https://host/x?token={REDACTED}&page=2"),
        ("run --hf-token abc --moe-router-topk 2 --num-key-value-heads 8",
         f"run --hf-token {REDACTED} --moe-router-topk 2 --num-key-value-heads 8"),
        ("step 10 loss=2.31 lr=0.0003 tokens=40960", "step 10 loss=2.31 lr=0.0003 tokens=40960"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\nxyz==\n-----END RSA PRIVATE KEY-----\nafter",
         f"{REDACTED}\nafter"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXkt", REDACTED),
        # issue 34: a whole JWT with no "token" word near (the signature too), Megatron's dotted argument lines,
        # the signatures of signed URLs (the URL stays readable)
        ("session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
         f"session {REDACTED} ok"),
        (f"  wandb_api_key ................ {WANDB_KEY}", f"  wandb_api_key ................ {REDACTED}"),
        ("  num_experts .......................... 64\n  hidden_size .......... 4096",
         "  num_experts .......................... 64\n  hidden_size .......... 4096"),
        ("https://b.s3.amazonaws.com/k?X-Amz-Date=20261201T000000Z&X-Amz-Signature=" + "ab" * 32 + "&x=1",
         f"https://b.s3.amazonaws.com/k?X-Amz-Date=20261201T000000Z&X-Amz-Signature={REDACTED}&x=1"),
        ("https://a.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig=Ab%2Bcd%2Fef%3D done",
         f"https://a.blob.core.windows.net/c/b?sv=2022-11-02&sp=r&sig={REDACTED} done"),
        ("https://s.googleapis.com/b/o?X-Goog-Signature=" + "cd" * 64,
         f"https://s.googleapis.com/b/o?X-Goog-Signature={REDACTED}"),
        ("design signature: stable; a sig figure", "design signature: stable; a sig figure"),
    ],
)
def test_text(text: str, expected: str) -> None:
    assert Redactor({}).text(text) == expected


def test_text_redacts_the_values_of_secret_variables_wherever_they_appear() -> None:
    r = Redactor({"MY_SECRET": "plain-words", "API_TOKEN": "short", "HOME": "/home/alice-secretive"})
    assert r.text("echo plain-words > /tmp/plain-words.txt") == f"echo {REDACTED} > /tmp/{REDACTED}.txt"
    assert r.text("short stays: too short to replace safely") == "short stays: too short to replace safely"
    assert r.text("/home/alice-secretive") == "/home/alice-secretive"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--hf-token", "abc"], ["--hf-token", REDACTED]),
        (["--token=abc"], [f"--token={REDACTED}"]),
        (["--api-key", "xyz", "--password", "1234", "--secret", "s", "--wandb-key", "k"],
         ["--api-key", REDACTED, "--password", REDACTED, "--secret", REDACTED, "--wandb-key", REDACTED]),
        (["--hub_token", "abc", "--auth-token=abc"], ["--hub_token", REDACTED, f"--auth-token={REDACTED}"]),
        (["--num-key-value-heads", "8", "--moe-router-topk", "2", "--api-key", "8"],
         ["--num-key-value-heads", "8", "--moe-router-topk", "2", "--api-key", "8"]),
        (["--moe-token-dispatcher-type", "alltoall", "--tokenizer-type", "GPT2BPETokenizer"],
         ["--moe-token-dispatcher-type", "alltoall", "--tokenizer-type", "GPT2BPETokenizer"]),
        (["--use-auth-token", "--bf16", "train.py"], ["--use-auth-token", "--bf16", "train.py"]),
        (["--data", "https://u:p@host/d"], ["--data", f"https://{REDACTED}@host/d"]),
        (["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--seq-length", "4096"],
         ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--seq-length", "4096"]),
    ],
)
def test_argv(argv: list[str], expected: list[str]) -> None:
    assert Redactor({}).argv(argv) == expected


def test_values_redacted_in_argv_are_redacted_in_later_text() -> None:
    r = Redactor({})
    assert r.argv(["train.py", "--hf-token", "tok-abcdefgh", "--key=zz-12345678", "--api-key", "8"]) == [
        "train.py", "--hf-token", REDACTED, f"--key={REDACTED}", "--api-key", "8"]
    later = r.text("loaded tok-abcdefgh and zz-12345678; 8 heads")
    assert later == f"loaded {REDACTED} and {REDACTED}; 8 heads"


def test_a_printed_argument_list_is_redacted() -> None:
    printed = str(["--hf-token", "tok-abcdefgh", "--bf16"])
    assert Redactor({}).text(printed) == f"['--hf-token', '{REDACTED}', '--bf16']"
    assert Redactor({}).text('["--api-key","abc"]') == f'["--api-key","{REDACTED}"]'


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://user:tok@github.com/a/b.git", "https://github.com/a/b.git"),
        ("https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/a/b", "https://github.com/a/b"),
        ("ssh://git@host:2222/a/b.git", "ssh://host:2222/a/b.git"),
        ("git@github.com:a/b.git", "git@github.com:a/b.git"),
        ("https://github.com/a/b.git", "https://github.com/a/b.git"),
        ("/srv/git/b.git", "/srv/git/b.git"),
    ],
)
def test_url(url: str, expected: str) -> None:
    assert Redactor({}).url(url) == expected


TOKENS = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=8, max_size=64)
FREE_TEXT = st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(token=TOKENS, name=st.sampled_from(["HF_TOKEN", "MY_SECRET"]), before=FREE_TEXT, after=FREE_TEXT)
def test_a_planted_secret_never_survives_text(token: str, name: str, before: str, after: str) -> None:
    r = Redactor({name: token, "PATH": "/usr/bin"})
    assert token not in r.text(before + token + after)
    assert token not in r.text(f"{before} {name}={token} {after}")


@settings(max_examples=300, deadline=None)
@given(
    token=TOKENS,
    name=st.sampled_from(["HF_TOKEN", "MY_SECRET"]),
    others=st.lists(FREE_TEXT, max_size=6),
    form=st.sampled_from(["{}", "--hf-token={}", "pre{}post", "https://x:{}@h/p", "--flag={}"]),
    position=st.integers(min_value=0, max_value=6),
    flag=st.sampled_from([[], ["--hf-token"], ["--api-key"], ["--seq-length"]]),
)
def test_a_planted_secret_never_survives_argv(
    token: str, name: str, others: list[str], form: str, position: int, flag: list[str]
) -> None:
    args = list(others)
    args[position:position] = [*flag, form.format(token)]
    out = Redactor({name: token}).argv(args)
    assert len(out) == len(args)
    assert not any(token in arg for arg in out)


def test_rules_file_is_the_installed_detect_secrets_export() -> None:
    import json

    from ledger.redact import RULES_FILE, export_rules

    assert json.loads(RULES_FILE.read_text()) == export_rules(), "run: python -m ledger.redact"


@given(st.text(alphabet=string.ascii_letters + string.digits + "+/=_-", min_size=1, max_size=60))
@settings(max_examples=50)
def test_entropy_is_detect_secrets_formula(token: str) -> None:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    from ledger.redact import shannon_entropy

    assert shannon_entropy(token) == pytest.approx(Base64HighEntropyString().calculate_shannon_entropy(token))


@pytest.mark.parametrize("name", ["dsv3-671b-1024xH100-mtp-fp8-blockwise", "mixtral-8x7b-capacity1.25-topk2-zloss1e-3",
                                  "/data/shards/Zk3xQ9vB2mL7pN4rT8sW1yA6/part-0001.bin"])
def test_run_names_and_paths_are_not_judged_by_entropy(name: str) -> None:
    r = Redactor({})
    assert r.label(name) == name and r.argv(["python", "train.py", name]) == ["python", "train.py", name]


def test_random_tokens_are_judged_by_entropy() -> None:
    token = "xK9vB2mQ7pL4nR8sT1wY6zA3cD5eF0gH"
    r = Redactor({})
    assert r.label(token) == REDACTED and r.argv(["train.py", token]) == ["train.py", REDACTED]
    assert r.text(f'key "{token}" set') == f'key "{REDACTED}" set'


def test_rules_are_compiled_when_their_guard_first_occurs() -> None:
    """A launch's plain texts compile only the unguarded token shapes; a rule is compiled (and applied) the
    first time its guard occurs. In a fresh interpreter: this one's earlier tests compiled rules already."""
    import subprocess
    import sys

    code = (
        "import ledger.redact as r\n"
        "red = r.Redactor({})\n"
        "assert red.argv(['python', 'train.py', '--lr', '0.1']) == ['python', 'train.py', '--lr', '0.1']\n"
        "rules = [p for p, _, guards in r._ALL_LINE + r._ALL_WHOLE if guards is not None]\n"
        "print(sum(p._compiled is not None for p in rules), len(rules))\n"
        "print(red.text('Authorization: Bearer abcdefghijkl1234'))\n"
        "print(sum(p._compiled is not None for p in rules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    compiled, total = map(int, out[0].split())
    assert compiled == 0 and total >= 20
    assert out[1] == f"Authorization: Bearer {REDACTED}"
    assert int(out[2]) >= 1

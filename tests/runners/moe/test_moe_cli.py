"""The runner's command line: bad input is one line on stderr and exit code 2, before anything trains."""

from __future__ import annotations

from typing import Any

import pytest

from runners.moe.cli import main
from runners.moe.configs import CONFIGS


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "huge"], "unknown config 'huge'; valid configs: tiny, tiny_dense"),
        (["--config", "tiny", "--set", "moe.experts=4"], "unknown override key 'moe.experts'; valid keys: "),
        (["--config", "tiny", "--set", "steps"], "is not key=value"),
        (["--config", "tiny", "--set", "moe.top_k=9"], "moe.top_k (9) must be <= moe.num_experts (8)"),
        (
            ["--config", "tiny", "--set", "parallel.ep=3"],
            "moe.num_experts (8) must be divisible by parallel.ep (3)",
        ),
        (["--config", "tiny", "--set", "moe.capacity_factor=0"], "moe.capacity_factor must be > 0"),
        (["--config", "tiny", "--set", "moe.capacity_factor=-1.5"], "moe.capacity_factor must be > 0"),
        (
            ["--config", "tiny", "--set", "precision=fp8", "--set", "fp8_backend=te"],
            "precision=fp8 needs a CUDA device and Transformer Engine",
        ),
        (
            ["--config", "tiny", "--set", "parallel.ep=2"],
            "parallel.ep=2 needs a world size divisible by it, got 1",
        ),
        (["--config", "tiny", "--set", "steps=ten"], "steps must be an integer; got 'ten'"),
        (["--config", "tiny", "--set", "device=tpu"], "device must be one of auto, cpu, cuda"),
        (
            ["--config", "tiny", "--set", "data.path=/no/such/file.txt"],
            "data.path '/no/such/file.txt' is not a readable",
        ),
        (["--config", "tiny", "--resume"], "--resume needs --checkpoint-dir"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err, err


def test_unknown_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", "tiny", "--bogus"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: unrecognized arguments: --bogus" in err


def test_bad_input_exits_2_from_the_shell(kit: Any) -> None:
    proc = kit.run(["--config", "tiny", "--set", "moe.num_experts=4", "--set", "moe.top_k=5"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: moe.top_k (5) must be <= moe.num_experts (4)"]
    assert proc.stdout == ""
    proc = kit.run(["--config", "nope"])
    assert proc.returncode == 2 and "valid configs: " + ", ".join(CONFIGS) in proc.stderr


def test_byte_level_training_on_a_local_file(kit: Any, tmp_path: Any) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    proc = kit.run(
        [
            "--config",
            "tiny",
            *kit.set_args([*kit.MICRO_MODEL, "steps=4", "eval_every=4", f"data.path={text}"]),
        ],
        run_dir=tmp_path / "run",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    evals = kit.read(tmp_path / "run", "evals").to_pylist()
    assert {r["source"] for r in evals} == {None, "text"}

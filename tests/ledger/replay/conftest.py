"""Fixtures of the sharing and export tests: a real S3 API (moto's server on 127.0.0.1, a free port) and a
small ledger of receipts recorded once, in process, through the real recording path."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PLANTED_SECRET = "plantedSECRETkey0123456789abcdefGHIJKLmnop"
"""The AWS secret key every test here runs with: it must never land in a file or an output."""


@dataclass
class S3:
    endpoint: str

    def client(self):  # noqa: ANN201 (boto3's client type is generated at run time)
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def bucket(self, versioned: bool = False) -> str:
        """A new, empty bucket (versioned: every PUT of a key keeps a version, so re-uploads can be counted)."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        client = self.client()
        client.create_bucket(Bucket=name)
        if versioned:
            client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return name


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """moto's S3 server in this process; the AWS variables point every client (boto, s3fs, pyarrow, delta-rs,
    and the `ledger` subprocesses, which inherit them) at it."""
    import logging

    from moto.server import ThreadedMotoServer
    from s3fs import S3FileSystem

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    empty = tmp_path_factory.mktemp("aws") / "config"
    empty.write_text("")  # no profile of this machine's user leaks in
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7TESTING")
        mp.setenv("AWS_SECRET_ACCESS_KEY", PLANTED_SECRET)
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_ENDPOINT_URL", endpoint)
        mp.setenv("AWS_CONFIG_FILE", str(empty))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
        # fsspec keeps one s3fs instance per process and arguments: one made against the server of an earlier session
        # in this process (mutmut runs pytest more than once in a process) would still point at that server
        S3FileSystem.clear_instance_cache()
        try:
            yield S3(endpoint)
        finally:
            server.stop()
            S3FileSystem.clear_instance_cache()


@pytest.fixture
def planted_secret() -> str:
    return PLANTED_SECRET


@pytest.fixture(scope="session")
def source(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Four small receipts, name -> id: a and b differ in precision only, c and d are two more runs."""
    import ledger
    import ledger.sdk

    lg = ledger.open(tmp_path_factory.mktemp("source") / "receipts")
    ids = {}
    for name, precision, seed in (("a", "fp32", 1), ("b", "bf16", 1), ("c", "fp32", 2), ("d", "fp32", 3)):
        with lg.recording(name=name) as rec:
            run = ledger.sdk.current()
            run.set_workload({"seed": seed, "precision": {"compute": precision},
                              "model": {"num_experts": 4, "top_k": 2}})
            for step in range(1, 7):
                run.log_step(step, loss=4.0 / step + seed / 100, tokens=step * 256, step_time_s=0.01 * seed,
                             tokens_per_s=25600.0 / seed)
                run.log_routing(step, 0, [100, 156, 128, 128], dropped=[0, 6, 0, 0], entropy=0.9)
                run.log_timing(step, "expert", 0.004)
        assert rec.receipt is not None
        ids[name] = rec.receipt.id
    ids["_root"] = str(lg.store.root)
    return ids


Clone = Callable[..., Path]


@pytest.fixture
def clone(source: dict[str, str]) -> Clone:
    """``clone(root, *names)``: a ledger at ``root`` holding copies of the named receipts of ``source``
    (placed where the store's layout says)."""
    from ledger.store.receipts import Ledger

    def make(root: Path, *names: str) -> Path:
        src, dst = Ledger(source["_root"]), Ledger(root)
        root.mkdir(parents=True, exist_ok=True)
        for name in names:
            target = dst.path(source[name])
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(src.path(source[name]), target)
        return root

    return make


def dvc_repo(path: Path, url: str, endpoint: str | None = None) -> Path:
    """A DVC repository (no git) whose default remote is ``url``: the config `dvc remote add -d team URL` and
    `dvc remote modify team endpointurl ...` write, without credentials."""
    (path / ".dvc").mkdir(parents=True, exist_ok=True)
    lines = ["[core]", "    remote = team", "    no_scm = True", "['remote \"team\"']", f"    url = {url}"]
    if endpoint:
        lines.append(f"    endpointurl = {endpoint}")
    (path / ".dvc" / "config").write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def make_dvc_repo() -> Callable[..., Path]:
    """``make_dvc_repo(path, url, endpoint=None)``: see :func:`dvc_repo`."""
    return dvc_repo

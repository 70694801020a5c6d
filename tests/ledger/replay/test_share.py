"""Sharing a ledger through a remote, against a real S3 API (moto's server): push uploads only what the remote
lacks, pull fetches only what is new and verifies it, two clones pushing at once lose nothing, credentials
never land in a file or an output, and an unreachable remote leaves the ledger untouched."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import BIN, child_env

import ledger
from ledger.replay import share
from ledger.store.integrity import verify_receipt
from ledger.store.receipts import Ledger

LEDGER = str(BIN / "ledger")


def _sh(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _versions(s3: Any, bucket: str) -> Counter[str]:
    """How many times each key was written (the bucket is versioned)."""
    pages = s3.client().get_paginator("list_object_versions").paginate(Bucket=bucket)
    return Counter(v["Key"] for page in pages for v in page.get("Versions", []))


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_ino) for p in root.rglob("*")
            if p.is_file() and "index.duckdb" not in p.name}


@pytest.mark.slow
def test_push_pull_between_clones(tmp_path: Path, s3: Any, source: dict[str, str], clone: Any,
                                  make_dvc_repo: Any) -> None:
    bucket = s3.bucket(versioned=True)
    first = make_dvc_repo(tmp_path / "first", f"s3://{bucket}/team-ledger", s3.endpoint)
    second = make_dvc_repo(tmp_path / "second", f"s3://{bucket}/team-ledger", s3.endpoint)
    clone(first / "receipts", "a", "b")

    pushed = _sh([LEDGER, "push"], first)
    assert pushed.stdout.strip() == "pushed 2 receipt(s) to the default DVC remote (0 already there)"
    keys = _versions(s3, bucket)
    files = {p for i in ("a", "b") for p in (Ledger(first / "receipts").path(source[i])).iterdir()}
    assert len(keys) == len(files) + 2 and set(keys.values()) == {1}  # every file and one marker per receipt

    pulled = _sh([LEDGER, "pull"], second)
    assert pulled.stdout.strip() == "pulled 2 receipt(s) from the default DVC remote (0 already here)"
    assert "2 receipt(s) checked, 0 damaged" in _sh([LEDGER, "verify"], second).stdout
    pulled_ledger = ledger.open(second / "receipts")  # indexed by the pull: listed and compared by name
    assert sorted(r.name for r in pulled_ledger.receipts()) == ["a", "b"]
    compared = pulled_ledger.compare("a", "b", attribution=False).to_json()
    assert [c["factor"] for c in compared["changed_factors"]] == ["precision"]
    assert not [p for p in (second / "receipts").iterdir() if p.name.startswith(".tmp-")]

    # one more receipt in the first clone: push uploads only it, pull fetches only it
    clone(first / "receipts", "c")
    again = share.push(Ledger(first / "receipts"))
    assert (again.moved, again.already) == ([source["c"]], 2)
    assert set(_versions(s3, bucket).values()) == {1}  # nothing uploaded twice
    before = _tree(second / "receipts")
    fetched = share.pull(Ledger(second / "receipts"))
    assert (fetched.moved, fetched.already) == ([source["c"]], 2)
    after = _tree(second / "receipts")
    assert {k: v for k, v in after.items() if k in before} == before  # what was here is untouched
    assert {k.split("/")[-2] for k in set(after) - set(before)} == {source["c"]}
    assert share.pull(Ledger(second / "receipts")).moved == []


@pytest.mark.slow
def test_concurrent_pushes_lose_nothing_and_store_no_secret(tmp_path: Path, s3: Any, source: dict[str, str],
                                                            clone: Any, make_dvc_repo: Any,
                                                            planted_secret: str) -> None:
    bucket = s3.bucket()
    url = f"s3://{bucket}/shared"
    one = make_dvc_repo(tmp_path / "one", url, s3.endpoint)
    two = make_dvc_repo(tmp_path / "two", url, s3.endpoint)
    clone(one / "receipts", "a", "c")
    clone(two / "receipts", "b", "c", "d")
    # a run recorded with the planted key in its environment, so the receipt had the chance to keep it
    recorded = _sh([LEDGER, "record", "--name", "with-key", "--", "python", "-c", "print('trained')"], one)
    assert recorded.returncode == 0

    pushes = [subprocess.Popen([LEDGER, "push"], cwd=repo, env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for repo in (one, two)]
    outputs = [p.communicate(timeout=300) for p in pushes]
    assert [p.returncode for p in pushes] == [0, 0], outputs

    third = make_dvc_repo(tmp_path / "third", url, s3.endpoint)
    pulled = _sh([LEDGER, "pull"], third)
    assert pulled.stdout.startswith("pulled 5 receipt(s)")
    union = set(Ledger(one / "receipts").ids()) | set(Ledger(two / "receipts").ids())
    assert len(union) == 5 and set(Ledger(third / "receipts").ids()) == union
    assert all(verify_receipt(Ledger(third / "receipts"), i) == [] for i in union)

    written = [p for repo in (one, two, third) for p in repo.rglob("*") if p.is_file()]
    assert any(p.name == "config" and p.parent.name == ".dvc" for p in written)
    leaked = [p for p in written if planted_secret.encode() in p.read_bytes()]
    assert leaked == []
    said = "".join(o for pair in outputs for o in pair) + recorded.stdout + recorded.stderr + pulled.stdout \
        + pulled.stderr
    assert planted_secret not in said
    objects = s3.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert not [o["Key"] for o in objects
                if planted_secret.encode() in s3.client().get_object(Bucket=bucket, Key=o["Key"])["Body"].read()]


@pytest.mark.slow
def test_unreachable_remote_leaves_the_ledger_untouched(tmp_path: Path, source: dict[str, str], clone: Any,
                                                        make_dvc_repo: Any) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    repo = make_dvc_repo(tmp_path / "repo", str(blocker / "remote"))  # a directory under a file: unreachable
    clone(repo / "receipts", "a")
    before = {p.relative_to(repo / "receipts"): p.read_bytes() for p in (repo / "receipts").rglob("*") if p.is_file()}
    failed = _sh([LEDGER, "push"], repo, check=False)
    assert failed.returncode == 1 and failed.stderr.startswith("Error: ")
    assert "the default DVC remote failed" in failed.stderr
    assert "the local ledger is untouched" in failed.stderr
    after = {p.relative_to(repo / "receipts"): p.read_bytes() for p in (repo / "receipts").rglob("*")
             if p.is_file() and "index.duckdb" not in p.name}
    assert after == before
    (tmp_path / "elsewhere").mkdir()
    no_repo = _sh([LEDGER, "push", "--ledger", str(tmp_path / "elsewhere")], tmp_path, check=False)
    assert no_repo.returncode == 2 and "no DVC repository contains" in no_repo.stderr


def test_pull_leaves_out_a_damaged_remote_receipt(tmp_path: Path, source: dict[str, str], clone: Any) -> None:
    remote = tmp_path / "remote"
    share.push(Ledger(clone(tmp_path / "src", "a", "b")), str(remote))
    damaged = remote / share.RECEIPTS / source["b"] / "steps.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\0")
    pulled = share.pull(Ledger(tmp_path / "dst"), str(remote))
    assert pulled.moved == [source["a"]] and list(pulled.damaged) == [source["b"]]
    assert "steps.parquet" in pulled.damaged[source["b"]]
    assert Ledger(tmp_path / "dst").ids() == [source["a"]]


def test_pull_goes_on_past_a_stale_marker_and_a_nested_receipt(tmp_path: Path, source: dict[str, str],
                                                                clone: Any) -> None:
    """Issue 34, item 8: one ``ids/<id>`` marker without its receipt aborted `pull` (0 of 3 healthy receipts came
    over), and a deeply nested ``receipt.json`` crashed it with a RecursionError traceback. Each is now left out
    with a note, on one line, and the healthy receipts come over."""
    remote = tmp_path / "remote"
    share.push(Ledger(clone(tmp_path / "src", "a", "c", "d")), str(remote))
    stale, nested = "e" * 64, "f" * 64
    (remote / share.IDS / stale).write_bytes(b"")  # a marker whose files never arrived (or were removed)
    (remote / share.RECEIPTS / nested).mkdir(parents=True)
    (remote / share.RECEIPTS / nested / "receipt.json").write_text("[" * 100_000 + "]" * 100_000)
    (remote / share.IDS / nested).write_bytes(b"")
    proc = subprocess.run([LEDGER, "pull", "--remote", str(remote), "--ledger", str(tmp_path / "dst")],
                          env=child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stdout.strip().splitlines()) == 1
    assert proc.stdout.startswith(f"pulled 3 receipt(s) from {remote} (0 already here); 2 damaged or incomplete on "
                                  "the remote and left out (")
    incomplete = f"{stale[:12]}: ids/{stale[:12]}... is on the remote but receipts/{stale[:12]}... holds no file"
    assert incomplete in proc.stdout
    assert f"{nested[:12]} receipt.json: nested too deeply to be a receipt (more than 64 levels)" in proc.stdout
    assert sorted(Ledger(tmp_path / "dst").ids()) == sorted(source[n] for n in ("a", "c", "d"))
    again = share.pull(Ledger(tmp_path / "dst"), str(remote))  # the next pull says so again, and moves nothing
    assert again.moved == [] and set(again.damaged) == {stale, nested}


def test_a_receipt_nested_too_deeply_is_refused_on_one_line(tmp_path: Path, source: dict[str, str],
                                                            clone: Any) -> None:
    """`ledger verify` of a receipt.json nested deeper than the interpreter's stack (before: a RecursionError
    traceback), and of one nested deeper than any receipt but still parsed: each refused on one line."""
    import json

    root = clone(tmp_path / "receipts", "a")
    path = Ledger(root).path(source["a"]) / "receipt.json"
    data = json.loads(path.read_text())
    for depth in (100_000, 200):
        deep = dict(data, workload=dict(data["workload"], arguments={"deep": "@"}))
        path.write_text(json.dumps(deep).replace('"@"', "[" * depth + "]" * depth))
        proc = subprocess.run([LEDGER, "verify", "--ledger", str(root)], env=child_env(), capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"{source['a'][:12]} receipt.json: nested too deeply to be a receipt (more than 64 levels)" in \
            proc.stdout


@pytest.mark.slow
def test_push_errors_are_one_line(tmp_path: Path, s3: Any, source: dict[str, str], clone: Any) -> None:
    """A remote of an unknown kind printed a traceback (fsspec's ValueError); an unreachable bucket is one line."""
    root = clone(tmp_path / "receipts", "a")
    env = child_env(AWS_ENDPOINT_URL="http://127.0.0.1:9")  # nothing listens there
    for remote in ("s3://no-such-bucket/ledger", "nosuchkind://bucket/ledger"):
        proc = subprocess.run([LEDGER, "push", "--remote", remote, "--ledger", str(root)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("Error: "), proc.stderr
        assert remote in proc.stderr and "the local ledger is untouched" in proc.stderr


def test_notes_and_archive_flags_travel_with_push_and_pull(tmp_path: Path, source: dict[str, str], clone: Any
                                                            ) -> None:
    """Annotations are records beside the receipts, shared like them: a set that only grows, each record named
    by its digest and checked on arrival; the receipts themselves are never rewritten."""
    remote = tmp_path / "remote"
    here = ledger.open(clone(tmp_path / "here", "a", "b"))
    here.note("a", "ran on a degraded node", author="alice")
    here.archive("b", reason="mistyped launch", author="bob")
    sealed = _tree(Ledger(here.root).path(source["a"]))
    first = share.push(Ledger(here.root), str(remote))
    assert first.annotations == 2 and "2 note/archive record(s)" in first.message
    assert share.push(Ledger(here.root), str(remote)).annotations == 0  # nothing twice

    there = ledger.open(tmp_path / "there")
    pulled = share.pull(Ledger(there.root), str(remote))
    assert pulled.annotations == 2
    assert [(n.kind, n.text, n.author) for n in there.notes("a")] == [("note", "ran on a degraded node", "alice")]
    assert list(there.runs()["name"]) == ["a"]  # b arrived archived
    assert sorted(there.runs(archived=True)["name"]) == ["a", "b"]
    assert _tree(Ledger(here.root).path(source["a"])) == sealed

    # a note added elsewhere comes back; two clones' records merge as a union, nothing overwritten
    there.note("a", "confirmed: ECC errors on gpu3", author="carol")
    there.unarchive("b", author="carol")
    assert share.push(Ledger(there.root), str(remote)).annotations == 2
    back = share.pull(Ledger(here.root), str(remote))
    assert (back.moved, back.annotations) == ([], 2)
    assert [n.author for n in here.notes("a")] == ["alice", "carol"]
    assert sorted(here.runs()["name"]) == ["a", "b"]  # unarchived by the later record

    # a record whose bytes do not match its name is left out and said
    bad = remote / share.ANNOTATIONS / source["a"] / ("0" * 64 + ".json")
    bad.write_bytes(next((remote / share.ANNOTATIONS / source["a"]).glob("*.json")).read_bytes())
    third = share.pull(Ledger(clone(tmp_path / "third", "a")), str(remote))
    assert third.annotations == 4  # a's two notes, and b's two flags (b is pulled too)
    assert list(third.damaged) == [f"annotations/{source['a']}/{'0' * 64}.json"]

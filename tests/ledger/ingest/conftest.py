"""The shared real-world fixtures (../shared/fixtures, or $STACKRECEIPT_SHARED/fixtures): read in place, never
copied. Outside CI a missing folder skips the tests that need it; under CI=true it fails them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SHARED

FIXTURES = SHARED / "fixtures"


def fixture_dir(name: str) -> Path:
    """A fixtures folder, or skip (outside CI) / fail (under CI) when it is absent."""
    path = FIXTURES / name
    if not path.is_dir():
        message = f"shared fixtures folder {path} is absent (set STACKRECEIPT_SHARED to the shared/ folder)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def megatron_dir() -> Path:
    return fixture_dir("megatron")


@pytest.fixture
def mlperf_dir() -> Path:
    return fixture_dir("mlperf")


@pytest.fixture
def golden_dir() -> Path:
    return fixture_dir("megatron_golden")


@pytest.fixture
def traces_dir() -> Path:
    return fixture_dir("traces")

#!/usr/bin/env bash
# Fetch, on a machine that reaches PyPI, the wheels the GPU machine lacks for scripts/gpu_proof.sh, into .whl/
# at the repository root (ignored by git through .git/info/exclude; carried to the device with carry [".whl"]).
# The lent H200 image (Python 3.12, x86-64) already has torch, numpy, scipy, pandas, pyarrow, click, rich,
# pyyaml, requests, statsmodels, nvidia-ml-py and typing-extensions; it lacks the ones below.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
cd "$ROOT"
EXCLUDE="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >> "$EXCLUDE"
mkdir -p .whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" -d .whl \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    typing-extensions duckdb==2.0.0 arch==8.0.0 detect-secrets==1.5.0 gitpython gitdb smmap megatron-core==0.16.1
du -sh .whl && ls .whl

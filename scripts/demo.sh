#!/usr/bin/env bash
# `make demo`: replay the demo matrix of params.yaml with `dvc repro` (a baseline MoE run on the reference
# runner's `tiny` config on CPU, single-factor variants and their combination, each under `ledger record`),
# then print the comparison and list the receipts. Receipts go to ./receipts.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" DVC_NO_ANALYTICS=1

dvc repro
echo
cat pipeline/compare.md
echo
ledger ls --where "tag.pipeline=dvc"
echo
echo "Next:  ledger show baseline    ledger compare baseline bf16    ledger report baseline bf16 --html report.html"

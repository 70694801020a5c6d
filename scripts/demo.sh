#!/usr/bin/env bash
# `make demo`: replay the demo matrix of params.yaml with `dvc repro` (a baseline MoE run on the reference
# runner's `tiny` config on CPU, single-factor variants and their combination, each under `ledger record`),
# then print the comparison (terminal text, once) and list the receipts. Receipts go to the demo's own ledger,
# demo/receipts (params.yaml's `ledger`), so the README Quickstart's ./receipts starts empty.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" DVC_NO_ANALYTICS=1

dvc repro
# the comparison once, as terminal text (the pipeline's compare.md is the Markdown for a review, not for here)
read -r A B < <(python -c "import yaml; c = yaml.safe_load(open('params.yaml'))['compare']; print(c['a'], c['b'])")
echo
ledger --ledger demo/receipts compare "$A" "$B"
echo
ledger ls --ledger demo/receipts --where "tag.pipeline=dvc"
echo
echo "Next:  ledger --ledger demo/receipts compare $A $B --markdown    ledger serve --ledger demo/receipts"
echo "       (or the README Quickstart, which records into ./receipts)"

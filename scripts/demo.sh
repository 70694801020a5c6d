#!/usr/bin/env bash
# `make demo`: record a baseline MoE run and two single-factor variants on the embedded default (the
# reference runner's `tiny` config on CPU), then list them. Uses ./receipts unless LEDGER_DIR is set.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

run() {
  local name=$1; shift
  echo "== ledger record --name $name -- python -m runners.moe --config tiny $*"
  ledger record --name "$name" --tag demo=1 -- python -m runners.moe --config tiny "$@" | tail -n 3
}

run baseline
run bf16 --set precision=bf16
run capacity-1.0 --set moe.capacity_factor=1.0
echo
ledger ls --where "tag.demo=1"
echo
echo "Inspect one:   .venv/bin/ledger show baseline"
echo "Query:         .venv/bin/ledger query \"SELECT name, round(final_loss, 3) AS loss, round(tokens_per_s) AS tok_s FROM receipts\""

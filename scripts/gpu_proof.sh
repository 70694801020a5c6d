#!/usr/bin/env bash
# The GPU proof in one command (issue 21; see scripts/gpu_proof.py for the steps).
#
#   scripts/gpu_proof.sh OUT [--budget-s 300] [--only STEP,...]     on a GPU machine
#   scripts/gpu_proof.sh OUT --dry-run                             the same steps on CPU at toy size
#
# A machine that cannot reach a package index (the lent H200) gets what it lacks as wheels in .whl/ at the
# repository root (scripts/gpu_proof_wheels.sh fetches them on a machine that can); they are installed into a
# scratch folder put on PYTHONPATH, leaving the machine's own torch alone (not in a dry run). Writes OUT/summary.json,
# OUT/summary.md, OUT/receipts.tar.gz and OUT/proof.log; exits 1 when a step failed or timed out.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_proof.sh OUT [--dry-run] [--budget-s S] [--only STEP,...]}
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
DRY=0
for arg in "$@"; do [ "$arg" = "--dry-run" ] && DRY=1; done
if [ "$DRY" = 0 ] && compgen -G "$ROOT/.whl/*.whl" >/dev/null; then  # a dry run uses this machine's packages
    SITE=${PROOF_SITE:-/tmp/gpu-proof-site}
    echo "installing $(ls "$ROOT"/.whl/*.whl | wc -l) carried wheels into $SITE" | tee -a "$OUT/proof.log"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$ROOT"/.whl/*.whl >>"$OUT/proof.log" 2>&1 || { echo "error: installing .whl/ failed (see $OUT/proof.log)"; exit 2; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" "$ROOT/scripts/gpu_proof.py" --out "$OUT" "$@"

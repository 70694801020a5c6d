#!/usr/bin/env bash
# Run every bench/bench_*.py in turn with the project's venv python, collect the JSON result lines into
# bench/out/results.jsonl and print a summary. A script that crashes does not stop the others; the exit
# status is non-zero when any script crashed (an unmet target is reported, not an error).
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
py="${PYTHON:-$root/.venv/bin/python}"
out="$here/out"
mkdir -p "$out"
results="$out/results.jsonl"
: > "$results"
crashed=()
for script in "$here"/bench_*.py; do
    [ -e "$script" ] || continue
    name="$(basename "$script" .py)"
    log="$out/$name.log"
    echo "=== $name"
    start=$SECONDS
    "$py" "$script" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc, $((SECONDS - start)) s"
    if [ "$rc" -ne 0 ]; then
        crashed+=("$name")
    fi
    # Every line of the output that is a JSON object with a "figure" is a result.
    "$py" - "$log" "$name" "$rc" >> "$results" <<'PYEOF'
import json, sys
path, script, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
found = 0
for line in open(path, errors="replace"):
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        row = json.loads(line)
    except ValueError:
        continue
    if isinstance(row, dict) and "figure" in row:
        print(json.dumps({"script": script, **row}))
        found += 1
if rc != 0 or not found:
    note = f"crashed (exit {rc})" if rc != 0 else "printed no result line"
    print(json.dumps({"script": script, "figure": None, "met": None, "note": note}))
PYEOF
done

echo
"$py" - "$results" <<'PYEOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
head = f"{'script':<24} {'figure':<38} {'value':>10} {'unit':<8} {'reference':>10} {'ratio':>8} {'target':>7} met"
print(head)
print("-" * len(head))
def num(v):
    return f"{v:10.4g}" if isinstance(v, int | float) and not isinstance(v, bool) else f"{'-':>10}"
for r in rows:
    met = {True: "yes", False: "NO", None: "-"}.get(r.get("met"), str(r.get("met")))
    print(f"{r['script']:<24} {str(r.get('figure') or r.get('note')):<38} {num(r.get('value'))} {str(r.get('unit', '')):<8} "
          f"{num(r.get('reference'))} {num(r.get('ratio'))[2:]} {num(r.get('target'))[3:]} {met}")
print(f"\n{len(rows)} result(s) in {sys.argv[1]}")
PYEOF

if [ "${#crashed[@]}" -ne 0 ]; then
    echo "crashed: ${crashed[*]}" >&2
    exit 1
fi

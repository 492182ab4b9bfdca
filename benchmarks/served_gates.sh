#!/bin/bash
# The archived and the same-run A/B gate on a planted server-side slowdown, against
# llama.cpp's server (the tiny example GGUF, 2 layers, then SLOW layers), limits +5%.
#   bash benchmarks/served_gates.sh 8   # ~3x slower model file
#   bash benchmarks/served_gates.sh 3   # ~+25%
#   bash benchmarks/served_gates.sh 3 exclusive   # A/B one side at a time (server.exclusive)
# Prints the verdict lines of both gates. A report, not a test.
set -u
SLOW=$1
EXCLUSIVE=""
if [ "${2:-}" = exclusive ]; then EXCLUSIVE="      exclusive: true"; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" && git init -q -b main
printf '[pytest]\n' > pytest.ini
printf 'reports/\n.perfguard/\n' > .gitignore
suite() {
cat > s.yaml <<YAML
defaults:
  warmup: {iterations: 50, seconds: 3}
  measure: {iterations: 200, seconds: 3, max_seconds: 60}
models:
  tiny:
    server:
      command: ["{python}", -m, perfguard_examples.tinyserver, --layers, "$1", --hidden, "256", --ffn, "1024", --, --port, "{port}", --n_threads, "1", --n_ctx, "512"]
$EXCLUSIVE
scenarios:
  - name: tiny-served
    model: tiny
    backend: server
    generate: {prompt_tokens: 48, new_tokens: 32}
    gate: {ttft_p95: "+5%", itl_p95: "+5%", tpot_p50: "+5%", p95: "+5%"}
YAML
git add -A && git commit -qm "layers $1"
}
PY="${PYTHON:-$ROOT/.venv/bin/python}"
export PYTHONPATH="$ROOT"
suite 2
$PY -m pytest --perfguard --perfguard-save -p no:cacheprovider -q s.yaml 2>&1 | grep -E "tiny-served\[|passed|failed" | head -3
suite $SLOW
echo "== archived, layers 2 -> $SLOW"
$PY -m pytest --perfguard -p no:cacheprovider -q s.yaml 2>&1 | grep -E "regressed|unchanged|^(ITL|TPOT|TTFT|P95)|passed|failed|inconclusive" | head -12
echo "== A/B${2:+ ($2)}, layers 2 -> $SLOW"
$PY -m pytest --perfguard --perfguard-ab=HEAD~1 -p no:cacheprovider -q s.yaml 2>&1 | grep -E "^(ITL|TPOT|TTFT|P95)|passed|failed|pairs|one side|blind|unchanged" | head -12

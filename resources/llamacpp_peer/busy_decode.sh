#!/usr/bin/env bash
# Batch-1 decode of SmolLM2-135M on a quiet machine and beside a competing CPU-bound process (issue
# 27): `ftx bench generate` (bf16 weights, decode of 128 tokens from an empty cache) against
# llama.cpp's llama-bench tg128 on the same values (bench_llamacpp.sh, BF16), alternated, each
# quiet and then with one busy loop pinned to the last core. Prints a markdown table.
#
# Not part of the product or its tests; run by hand, alone on the machine, after
# build_llamacpp.sh and a build of ftx:
#   resources/llamacpp_peer/busy_decode.sh [--rounds N] [--threads N]
# Environment: FTX (default build/app/ftx), FTX_MODEL_CACHE (default ~/.cache/ftx/models), and
# whatever the two programs read (OMP_WAIT_POLICY, FTX_CPU_ISA, ...).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ftx=${FTX:-build/app/ftx}
model=${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}/SmolLM2-135M-Instruct.Q4_1.gguf
rounds=2
threads=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift ;;
    --threads) threads=$2; shift ;;
    *) echo "busy_decode.sh: $1: unknown option (--rounds N, --threads N)" >&2; exit 1 ;;
  esac
  shift
done
[[ -x $ftx ]] || { echo "busy_decode.sh: $ftx: no ftx binary (build first, or set FTX)" >&2; exit 1; }
[[ -f $model ]] || { echo "busy_decode.sh: $model: missing (./test.sh fetches it)" >&2; exit 1; }

busy_pid=
start_busy() {
  taskset -c "$(($(nproc) - 1))" bash -c 'while :; do :; done' &
  busy_pid=$!
}
stop_busy() {
  if [[ -n $busy_pid ]]; then
    kill "$busy_pid" 2>/dev/null || true
    wait "$busy_pid" 2>/dev/null || true  # 143: the loop ended by the signal
  fi
  busy_pid=
}
trap stop_busy EXIT

ftx_decode() {
  OMP_NUM_THREADS=$threads "$ftx" bench generate --checkpoint "$model" --steps 3 --warmup 1 |
    python3 -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["decode_tokens_per_s"])'
}
llama_decode() {
  "$here/bench_llamacpp.sh" --threads "$threads" |
    python3 -c 'import json, sys; print("%.1f" % json.loads(sys.stdin.readline())["tg128_tokens_per_s"])'
}

echo "| round | machine | ftx decode tok/s | llama.cpp tg128 tok/s | ratio |"
echo "|---|---|---|---|---|"
for r in $(seq "$rounds"); do
  for load in quiet busy; do
    [[ $load == busy ]] && start_busy
    f=$(ftx_decode)
    l=$(llama_decode)
    stop_busy
    echo "| $r | $load | $f | $l | $(python3 -c "print(f'{$f / $l:.2f}x')") |"
  done
done

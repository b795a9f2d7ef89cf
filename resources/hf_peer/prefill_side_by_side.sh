#!/usr/bin/env bash
# The 512-token prefill of SmolLM2-135M (BF16 GGUF) against transformers at bf16 (issue 27), in one
# run, alternated: per round `ftx bench generate` (prefill tok/s), then bench_transformers.py at
# OpenMP's default wait and at OMP_WAIT_POLICY=PASSIVE. The ratio is to the better of the two
# waits (the peer's best threading). Prints a markdown table.
#
# `ftx` runs at --precision bf16 by default: the products of attention too take bf16 inputs (on
# the AMX tiles where the CPU has them), as every product of transformers at bf16 does; the
# Linear layers of a bf16 checkpoint round their inputs at either precision on AVX512_BF16 and
# AMX. --precision fp32 keeps attention's products in fp32.
#
# Not part of the product or its tests; run by hand, alone on the machine, after ./test.sh (the
# venv with torch and transformers, the model) and resources/llamacpp_peer/build_llamacpp.sh (which
# writes the BF16 GGUF):
#   resources/hf_peer/prefill_side_by_side.sh [--rounds N] [--precision bf16|fp32]
# Environment: FTX (default build/app/ftx), FTX_MODEL_CACHE (default ~/.cache/ftx/models),
# FTX_VENV (default ~/.cache/ftx/venv), and whatever the programs read (FTX_CPU_ISA, ...).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ftx=${FTX:-build/app/ftx}
model=${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}/SmolLM2-135M-Instruct.BF16.gguf
python=${FTX_VENV:-$HOME/.cache/ftx/venv}/bin/python
rounds=3
precision=bf16
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift ;;
    --precision) precision=$2; shift ;;
    *) echo "prefill_side_by_side.sh: $1: unknown option (--rounds N, --precision bf16|fp32)" >&2; exit 1 ;;
  esac
  shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "prefill_side_by_side.sh: --rounds $rounds: not a positive count" >&2; exit 1; }
[[ $precision == bf16 || $precision == fp32 ]] || { echo "prefill_side_by_side.sh: --precision $precision: not bf16 or fp32" >&2; exit 1; }
[[ -x $ftx ]] || { echo "prefill_side_by_side.sh: $ftx: no ftx binary (build first, or set FTX)" >&2; exit 1; }
[[ -f $model ]] || { echo "prefill_side_by_side.sh: $model: missing (build_llamacpp.sh writes it)" >&2; exit 1; }
[[ -x $python ]] || { echo "prefill_side_by_side.sh: $python: no venv (./test.sh makes it)" >&2; exit 1; }

ftx_prefill() {
  "$ftx" bench generate --checkpoint "$model" --steps 10 --warmup 1 --decode-len 1 --precision "$precision" |
    python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["prefill_tokens_per_s"])'
}
hf_prefill() {  # the line of JSON is the last thing bench_transformers.py prints
  "$python" "$here/bench_transformers.py" --model "$model" --dtype bf16 --decode 8 --reps 5 2>/dev/null |
    tail -n 1 | python3 -c 'import json, sys; print("%.0f" % json.loads(sys.stdin.read())["prefill_tokens_per_s"])'
}

echo "| round | ftx prefill tok/s (--precision $precision) | transformers, default wait | transformers, PASSIVE | ratio to the better |"
echo "|---|---|---|---|---|"
for r in $(seq "$rounds"); do
  f=$(ftx_prefill)
  d=$(hf_prefill)
  p=$(OMP_WAIT_POLICY=PASSIVE hf_prefill)
  ratio=$(python3 -c "print('%.2fx' % ($f / max($d, $p)))")
  echo "| $r | $f | $d | $p | $ratio |"
done

#!/usr/bin/env bash
# Decode of several sequences together (the studio's groups, a server's batch) on SmolLM2-135M at
# BF16: `ftx bench generate --batch N` against llama.cpp's llama-batched-bench on the same GGUF, each
# sequence its own prompt of --prompt tokens, then --decode tokens per sequence; decode tokens per
# second summed over the N sequences (llama-batched-bench's S_TG). The two programs alternate for
# each N, for --rounds rounds. Prints a markdown table.
#
# Not part of the product or its tests; run by hand, alone on the machine, after
# build_llamacpp.sh (which builds llama-batched-bench) and a build of ftx:
#   resources/llamacpp_peer/batched_decode.sh [--batches 1,4,8,16,32] [--rounds N] [--threads N]
#                                             [--prompt N] [--decode N]
# Environment: FTX (default build/app/ftx), FTX_MODEL_CACHE (default ~/.cache/ftx/models),
# FTX_LLAMACPP_DIR (default ~/.cache/ftx/llama.cpp), LLAMACPP_ISA (native, the default, or avx2:
# the build-avx2/ of `LLAMACPP_ISA=avx2 build_llamacpp.sh`, beside `FTX_CPU_ISA=avx2
# OPENBLAS_CORETYPE=Haswell`), and whatever the two programs read (FTX_CPU_ISA, OMP_WAIT_POLICY,
# ...). The BF16 GGUF is the one bench_llamacpp.sh converts.
set -euo pipefail

ftx=${FTX:-build/app/ftx}
model=${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}/SmolLM2-135M-Instruct.BF16.gguf
llamacpp=${FTX_LLAMACPP_DIR:-$HOME/.cache/ftx/llama.cpp}
case ${LLAMACPP_ISA:-native} in
  native) bench=$llamacpp/build/bin/llama-batched-bench ;;
  avx2) bench=$llamacpp/build-avx2/bin/llama-batched-bench ;;
  *) echo "batched_decode.sh: LLAMACPP_ISA=${LLAMACPP_ISA}: unknown (native, avx2)" >&2; exit 1 ;;
esac
batches=1,4,8,16,32
rounds=2
threads=2
prompt=32
decode=32
while [[ $# -gt 0 ]]; do
  case $1 in
    --batches) batches=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --threads) threads=$2; shift ;;
    --prompt) prompt=$2; shift ;;
    --decode) decode=$2; shift ;;
    *) echo "batched_decode.sh: $1: unknown option (--batches N,N,..., --rounds N, --threads N, --prompt N, --decode N)" >&2
      exit 1 ;;
  esac
  shift
done
for v in "$rounds" "$threads" "$prompt" "$decode" ${batches//,/ }; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "batched_decode.sh: '$v': expected a positive integer" >&2; exit 1; }
done
[[ -x $ftx ]] || { echo "batched_decode.sh: $ftx: no ftx binary (build first, or set FTX)" >&2; exit 1; }
[[ -x $bench ]] || { echo "batched_decode.sh: $bench: missing (run resources/llamacpp_peer/build_llamacpp.sh)" >&2; exit 1; }
[[ -f $model ]] || { echo "batched_decode.sh: $model: missing (resources/llamacpp_peer/bench_llamacpp.sh makes it)" >&2; exit 1; }

ftx_decode() {  # $1: sequences
  OMP_NUM_THREADS=$threads "$ftx" bench generate --checkpoint "$model" --batch "$1" --prompt-len "$prompt" \
    --decode-len "$decode" --steps 2 --warmup 1 |
    python3 -c 'import json, sys; print("%.1f" % json.load(sys.stdin)["decode_tokens_per_s"])'
}
llama_decode() {  # $1: sequences
  local ctx=$(($1 * (prompt + decode) + 64))
  "$bench" -m "$model" -t "$threads" -c "$ctx" -b 2048 -ub 512 -npp "$prompt" -ntg "$decode" -npl "$1" \
    --output-format jsonl 2>/dev/null |
    python3 -c 'import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{") and "speed_tg" in l]
print("%.1f" % rows[-1]["speed_tg"])'
}

echo "| sequences | round | ftx decode tok/s | llama.cpp S_TG tok/s | ratio |"
echo "|---|---|---|---|---|"
for n in ${batches//,/ }; do
  for r in $(seq "$rounds"); do
    f=$(ftx_decode "$n")
    l=$(llama_decode "$n")
    echo "| $n | $r | $f | $l | $(python3 -c "print('%.2fx' % ($f / $l))") |"
  done
done

#!/usr/bin/env bash
# The llama.cpp peer of `ftx bench generate`: llama-bench (CPU, batch 1) on SmolLM2-135M-Instruct,
# prefill of 512 tokens (pp512) and greedy-speed decode of 128 tokens (tg128), 3 repetitions,
# printed as one JSON line per model file:
#   {"peer":"llama.cpp","model":...,"weights":"BF16","threads":2,"repack":true,"poll":50,
#    "pp512_tokens_per_s":...,"pp512_stddev":...,"tg128_tokens_per_s":...,"tg128_stddev":...,
#    "repetitions":3,"build":...,"cpu":...}
#
# The weights are the Q4_1 GGUF that ./test.sh fetches, converted once to BF16 with
# `llama-quantize --allow-requantize ... BF16` into the same cache (SmolLM2-135M-Instruct.BF16.gguf):
# the dequantized Q4_1 values rounded to bf16, the precision ftx's inference path runs in. With
# --q4_1 the original Q4_1 file is measured too (llama.cpp's quantized kernels). llama-bench's
# tg128 decodes from an empty context (depth 0), while resources/hf_peer/bench_transformers.py decodes
# after its 512-token prefill unless given --decode-from-empty.
#
# Not part of the product or its tests; run by hand, alone on the machine (no build beside it):
#   resources/llamacpp_peer/build_llamacpp.sh      # once: llama.cpp into ~/.cache/ftx/llama.cpp
#   resources/llamacpp_peer/bench_llamacpp.sh [--q4_1] [--threads N] [--reps N] [--poll 0..100]
# --poll is llama-bench's (default 50: worker threads spin between ops); on a machine other jobs are
# loading, --poll 0 is the analogue of OMP_WAIT_POLICY=PASSIVE for the PyTorch peers.
# Environment: FTX_MODEL_CACHE (default ~/.cache/ftx/models), FTX_LLAMACPP_DIR (default
# ~/.cache/ftx/llama.cpp), LLAMACPP_ISA (native, the default, or avx2: the build-avx2/ that
# `LLAMACPP_ISA=avx2 build_llamacpp.sh` makes).
set -euo pipefail

cache=${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}
llamacpp=${FTX_LLAMACPP_DIR:-$HOME/.cache/ftx/llama.cpp}
case ${LLAMACPP_ISA:-native} in
  native) bin=$llamacpp/build/bin ;;
  avx2) bin=$llamacpp/build-avx2/bin ;;
  *) echo "bench_llamacpp.sh: LLAMACPP_ISA=${LLAMACPP_ISA}: unknown (native, avx2)" >&2; exit 1 ;;
esac
q4=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
bf16=$cache/SmolLM2-135M-Instruct.BF16.gguf
threads=2
reps=3
with_q4=0
poll=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --q4_1) with_q4=1 ;;
    --threads) threads=$2; shift ;;
    --reps) reps=$2; shift ;;
    --poll) poll=(--poll "$2"); shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "bench_llamacpp.sh: $1: unknown option (--q4_1, --threads N, --reps N, --poll N)" >&2; exit 1 ;;
  esac
  shift
done

for t in llama-bench llama-quantize; do
  [[ -x $bin/$t ]] || { echo "$bin/$t: missing (run resources/llamacpp_peer/build_llamacpp.sh)" >&2; exit 1; }
done
[[ -f $q4 ]] || { echo "$q4: missing (./test.sh fetches it)" >&2; exit 1; }

if [[ ! -f $bf16 ]]; then
  echo "converting $q4 to BF16 (once): $bf16" >&2
  "$bin/llama-quantize" --allow-requantize "$q4" "$bf16.part" BF16 "$threads" >"$bf16.log" 2>&1 \
    || { echo "$bf16: llama-quantize failed (see $bf16.log)" >&2; rm -f "$bf16.part"; exit 1; }
  mv "$bf16.part" "$bf16" && rm -f "$bf16.log"
fi

bench() {  # $1: model file, $2: label of its weights
  local json repack=true
  if ! json=$("$bin/llama-bench" -m "$1" -t "$threads" -p 512 -n 128 -r "$reps" "${poll[@]}" -o json 2>/dev/null); then
    # On AMX CPUs this llama.cpp crashes in the AMX repack of Q4_1 weights (like llama.cpp#20824):
    # measured again without the CPU's extra buffer types (plain ggml kernels), and said so.
    echo "$1: llama-bench failed; again with --repack 0" >&2
    repack=false
    json=$("$bin/llama-bench" -m "$1" -t "$threads" -p 512 -n 128 -r "$reps" "${poll[@]}" --repack 0 -o json 2>/dev/null) \
      || { echo "$1: llama-bench failed, with and without --repack 0" >&2; exit 1; }
  fi
  python3 - "$json" "$(basename "$1")" "$2" "$threads" "$repack" "${poll[1]:-50}" <<'PY'
import json, sys
rows = json.loads(sys.argv[1])
out = {"peer": "llama.cpp", "model": sys.argv[2], "weights": sys.argv[3], "threads": int(sys.argv[4]),
       "repack": sys.argv[5] == "true", "poll": int(sys.argv[6])}
for r in rows:  # one row per test: pp512 (n_gen 0), then tg128 (n_prompt 0)
    key = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    out[key + "_tokens_per_s"] = round(r["avg_ts"], 2)
    out[key + "_stddev"] = round(r["stddev_ts"], 2)
out["repetitions"] = len(rows[0].get("samples_ts", []))
out["build"] = f"{rows[0].get('build_commit')} ({rows[0].get('build_number')})"
out["cpu"] = rows[0].get("cpu_info")
print(json.dumps(out))
PY
}

bench "$bf16" BF16
[[ $with_q4 -eq 1 ]] && bench "$q4" Q4_1
exit 0

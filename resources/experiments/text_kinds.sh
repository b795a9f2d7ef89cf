#!/usr/bin/env bash
# Issue 24's corpus: real text of four kinds from files Debian packages install, one folder per
# kind, about the same number of bytes of each (docs/text_latent.md):
#   python  the Python standard library (libpython3.11-stdlib, libpython3.11-minimal), not its tests
#   c       C headers (libc6-dev, linux-libc-dev and the -dev packages of the build)
#   perl    Perl modules (perl-modules-5.36, and /usr/share/perl5)
#   prose   licences: base-files' common-licenses and every free-form copyright file (not the
#           machine-readable "Format: ..." ones, which are field lists rather than prose)
#
#   resources/experiments/text_kinds.sh corpus     # $EXP/text_kinds/<kind>/..., and a count per kind
#   resources/experiments/text_kinds.sh tokenize   # $EXP/text_kinds.tok (+ .kinds.json), SmolLM2's tokenizer
#   resources/experiments/text_kinds.sh tokenize-bpe   # $EXP/text_kinds_4096.tok: a 4,096-token BPE of the corpus
#   resources/experiments/text_kinds.sh train NAME H KAPPA_BITS  # the small preset on text_kinds_4096.tok
#                                      (H 0: the baseline; WINDOWS=packed for run 1's packed sequences;
#                                      ROUTE_ARGS="--routing sdt --capacity 0.5": a routed run, issue 25)
#   resources/experiments/text_kinds.sh measure NAME   # groups from the neutral prompt, judged by kind
#   resources/experiments/text_kinds.sh ship FREE BASE # both as resources/models/kinds-free, kinds-baseline
#
# The upcycled recipe (SmolLM2-135M and its own tokenizer; about 120 tokens/s on 2 cores, so a step of
# 8 x 256 tokens takes 17 s):
#   resources/experiments/text_kinds.sh upcycle-prepare   # text_kinds.tok, smol-kinds-base (H 0), smol-kinds-ft (H 8)
#   resources/experiments/text_kinds.sh upcycle-train base|ft   # STEPS (450), LR (1e-4), KAPPA_START (anneal from)
#   resources/experiments/text_kinds.sh measure smol-kinds-ft
#   EVAL_STEPS="0 150" resources/experiments/text_kinds.sh upcycle-eval base|ft   # HumanEval
#
# Files are taken in a fixed pseudo-random order (the MD5 of their path) until BUDGET bytes per
# kind (default 4 MB), so the corpus is the same on every Debian 12 machine with the same
# packages. Everything goes to $EXP (default ~/ftx-exp).
set -euo pipefail
cd "$(dirname "$0")/../.."
FTX=${FTX:-build/app/ftx}
EXP=${EXP:-$HOME/ftx-exp}
MODEL=${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}/SmolLM2-135M-Instruct.Q4_1.gguf
BUDGET=${BUDGET:-4000000}
CORPUS=$EXP/text_kinds

# list KIND: the candidate files of a kind, one path a line.
list() {
  case $1 in
    python) find /usr/lib/python3.11 -name '*.py' -type f -not -path '*/test/*' -not -path '*/tests/*' ;;
    c) find /usr/include -name '*.h' -type f ;;
    perl) find /usr/share/perl/5.36.0 /usr/share/perl5 -name '*.pm' -type f 2>/dev/null ;;
    prose)
      find /usr/share/common-licenses -type f
      for f in /usr/share/doc/*/copyright; do
        [ -f "$f" ] && ! head -c 7 "$f" | grep -q '^Format:' && echo "$f"
      done
      ;;
  esac
}

case ${1:-} in
  corpus)
    rm -rf "$CORPUS.tmp"
    for kind in python c perl prose; do
      mkdir -p "$CORPUS.tmp/$kind"
      total=0 files=0
      while read -r _ path; do
        size=$(stat -c %s "$path")
        [ "$size" -ge 200 ] || continue  # a few lines say nothing of their kind
        [ $((total + size)) -le "$BUDGET" ] || continue
        cp "$path" "$CORPUS.tmp/$kind/$(echo "${path#/}" | tr / _)"
        total=$((total + size)) files=$((files + 1))
      done < <(list $kind | while read -r p; do echo "$(echo -n "$p" | md5sum | cut -c1-32) $p"; done | sort)
      echo "$kind: $files files, $total bytes"
    done
    rm -rf "$CORPUS" && mv "$CORPUS.tmp" "$CORPUS"
    ;;
  tokenize)
    "$FTX" tokenize --checkpoint "$MODEL" --input "$CORPUS" --kinds python,c,perl,prose --val-frac 0.1 \
      --out "$EXP/text_kinds.tok"
    ;;
  tokenize-bpe)
    "$FTX" tokenize --bpe-vocab 4096 --input "$CORPUS" --kinds python,c,perl,prose --val-frac 0.1 \
      --out "$EXP/text_kinds_4096.tok"
    ;;
  train)
    run=${2:?run name} bits=${3:?latent bits} kappa=${4:?kappa in bits}
    if "$FTX" runs --db "$EXP/runs.db" 2>/dev/null | grep -q "^$run "; then
      exec "$FTX" train --db "$EXP/runs.db" --run "$run" --resume
    fi
    exec "$FTX" train --dataset text --data "$EXP/text_kinds_4096.tok" --seq-len 256 --windows "${WINDOWS:-document}" --preset small \
      --latent-bits "$bits" --kappa-bits "$kappa" --batch 16 --steps "${STEPS:-2000}" --eval-every 250 \
      --val-sequences 64 --checkpoint-every 500 --db "$EXP/runs.db" --run "$run" ${ROUTE_ARGS:-}
    ;;
  measure)
    "$FTX" generate --db "$EXP/runs.db" --run "${2:?run name}" --prompt "<|endoftext|>" --independent 32 \
      --fixed-groups 8 --group-size 8 --kinds --seed "${SEED:-1}"
    ;;
  upcycle-prepare)
    # The Free Transformer's knobs: H 8, kappa KAPPA bits (1/4), the post-sampler POST (bitlinear:
    # Z moves the logits from step 0; zero keeps the Llama's logits exactly at step 0).
    [ -f "$EXP/text_kinds.tok" ] || "$0" tokenize
    "$FTX" upcycle --from "$MODEL" --latent-bits 0 --out "$EXP/smol-kinds-base"
    "$FTX" upcycle --from "$MODEL" --latent-bits 8 --kappa-bits "${KAPPA:-0.25}" --post-sampler "${POST:-bitlinear}" \
      --out "$EXP/smol-kinds-ft"
    ;;
  upcycle-train)
    run=smol-kinds-${2:?base or ft}
    if "$FTX" runs --db "$EXP/runs.db" 2>/dev/null | grep -q "^$run "; then
      exec "$FTX" train --db "$EXP/runs.db" --run "$run" --resume
    fi
    anneal=()
    [ -n "${KAPPA_START:-}" ] && anneal=(--kappa-start-bits "$KAPPA_START" --kappa-anneal-steps "${ANNEAL_STEPS:-200}")
    exec "$FTX" train --init "$EXP/$run" --dataset text --data "$EXP/text_kinds.tok" --seq-len 256 --windows document \
      --batch 8 --lr "${LR:-1e-4}" --warmup 20 --steps "${STEPS:-450}" --eval-every 50 --val-sequences 64 \
      --checkpoint-every 75 "${anneal[@]}" --db "$EXP/runs.db" --run "$run"
    ;;
  upcycle-eval)
    # HumanEval (greedy pass@1, the canonical solutions' NLL) at EVAL_STEPS (kept checkpoints, or 0
    # for the starting point), stored with the run for the Benchmarks view: the stdlib recipe's loop.
    EXP=$EXP exec "$(dirname "$0")/smollm2_stdlib.sh" eval "kinds-${2:?base or ft}"
    ;;
  ship)
    # Both runs exported in BF16 under the names the studio and the tests use; the Free Transformer
    # measured again on those BF16 weights (its kinds/... metrics at the last checkpoint, what the
    # shipped test re-measures), through a scratch store.
    free=${2:?Free Transformer run} base=${3:?baseline run}
    scratch=$EXP/ship && rm -rf "$scratch" && mkdir -p "$scratch"
    "$FTX" export --db "$EXP/runs.db" --run "$free" --as kinds-free --out "$scratch/kinds-free"
    "$FTX" import --db "$scratch/runs.db" "$scratch/kinds-free"
    sqlite3 "$scratch/runs.db" "DELETE FROM metrics WHERE key LIKE 'kinds/%'"  # measured on F32 weights
    "$FTX" generate --db "$scratch/runs.db" --run kinds-free --prompt "<|endoftext|>" --kinds --seed 1
    "$FTX" export --db "$scratch/runs.db" --run kinds-free --out resources/models/kinds-free
    "$FTX" export --db "$EXP/runs.db" --run "$base" --as kinds-baseline --out resources/models/kinds-baseline
    ;;
  *)
    sed -n '2,27p' "$0"
    exit 2
    ;;
esac

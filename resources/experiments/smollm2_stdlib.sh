#!/usr/bin/env bash
# The README's real experiment: SmolLM2-135M-Instruct fine-tuned on the Python standard library's
# sources as the plain baseline and upcycled to a Free Transformer (H = 16, kappa 1/2 bit), the
# same steps on the same data, then HumanEval scored at the kept checkpoints.
#
#   resources/experiments/smollm2_stdlib.sh prepare        # data file and the two starting points
#   resources/experiments/smollm2_stdlib.sh train base     # ~50 min on 2 cores; one training at a time
#   resources/experiments/smollm2_stdlib.sh train ft16     # ~55 min
#   resources/experiments/smollm2_stdlib.sh eval base      # HumanEval (164) at steps 0, 225, 450: ~13 min each
#   resources/experiments/smollm2_stdlib.sh eval ft16
#
# Everything goes to $EXP (default ~/ftx-exp): the store runs.db, checkpoints beside it. A run that
# was stopped continues with `train NAME` again (it resumes from its latest checkpoint).
set -euo pipefail
cd "$(dirname "$0")/../.."
FTX=${FTX:-build/app/ftx}
EXP=${EXP:-$HOME/ftx-exp}
MODEL=${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}/SmolLM2-135M-Instruct.Q4_1.gguf
HUMANEVAL=${FTX_DATA_CACHE:-$HOME/.cache/ftx/data}/HumanEval.jsonl
STDLIB=${STDLIB:-/usr/lib/python3.11}
STEPS=450
EVAL_STEPS=${EVAL_STEPS:-0 225 450}  # any of 0 and the kept checkpoints (every 75 steps)
mkdir -p "$EXP"

case ${1:-} in
  prepare)
    "$FTX" tokenize --checkpoint "$MODEL" --input "$STDLIB" --ext .py --out "$EXP/stdlib.tok"
    "$FTX" upcycle --from "$MODEL" --latent-bits 0 --out "$EXP/smol-base"
    "$FTX" upcycle --from "$MODEL" --latent-bits 16 --kappa-bits 0.5 --out "$EXP/smol-ft16"
    ;;
  train)
    run=smol-${2:?base or ft16}
    if "$FTX" runs --db "$EXP/runs.db" 2>/dev/null | grep -q "^$run "; then
      exec "$FTX" train --db "$EXP/runs.db" --run "$run" --resume
    fi
    exec "$FTX" train --init "$EXP/$run" --dataset text --data "$EXP/stdlib.tok" --seq-len 256 --batch 8 \
      --lr 1e-4 --warmup 20 --steps $STEPS --eval-every 50 --val-sequences 64 --checkpoint-every 75 \
      --db "$EXP/runs.db" --run "$run"
    ;;
  eval)
    run=smol-${2:?base or ft16}
    for step in $EVAL_STEPS; do
      if [[ $step == 0 ]]; then  # the starting point, stored as the run's step 0
        "$FTX" eval --checkpoint "$EXP/$run" --run "$run" --db "$EXP/runs.db" --task humaneval --data "$HUMANEVAL" \
          --samples "$EXP/$run-humaneval-$step.jsonl"
      else
        "$FTX" eval --run "$run" --step $step --db "$EXP/runs.db" --task humaneval --data "$HUMANEVAL" \
          --samples "$EXP/$run-humaneval-$step.jsonl"
      fi
    done
    ;;
  *)
    sed -n '2,13p' "$0"
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Data-parallel checks on a GPU machine (issue 26, docs/distributed.md), with the ftx of the bundle
# that on_device.sh unpacked (FTX, LD_LIBRARY_PATH set) or, run alone, unpacking it here:
#   1. one process against `mpirun -np 2` on the GPUs, the same global batch, 50 steps: the loss
#      and gradient-norm curves must agree to 1e-4, for three ways of summing: in buckets during
#      the backward (the default), after it (--bucket-mb 0), and with ZeRO-1 (--shard-optimizer).
#      With two GPUs or more each rank has its own and NCCL sums and gathers; with one, the two
#      ranks share it and the gradients go through the host (NCCL refuses two ranks on one GPU;
#      ftx says so and takes the host path).
#   2. ftx bench train --processes 1, 2, 4, 8 on the CPU cores: tokens/s and the collectives' share;
#      with two GPUs or more, also 1 and 2 processes on the GPUs, bucketed and not.
# Prints markdown; exit 1 when a check fails or does not run. Needs mpirun (skipped without).
set -uo pipefail
if [ -z "${FTX:-}" ]; then
  root=$(mktemp -d)
  tar -C "$root" -xJf .gpu/bundle.tar.xz
  export LD_LIBRARY_PATH="$root/lib:/usr/local/cuda/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu"
  FTX="$root/bin/ftx"
fi
work=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "## Data-parallel training on the GPUs: 1 process against 2, small preset, H = 8, batch 32, fp32 GEMMs, 50 steps"
echo
if ! command -v mpirun >/dev/null; then
  echo "skipped: no mpirun on this machine"
  exit 1
fi
echo "$(mpirun --version 2>&1 | head -1), $(nvidia-smi -L 2>/dev/null | wc -l) GPU(s), $(nproc) cores"
echo
status=0
dp="train --device cuda --precision fp32 --dataset synthetic --preset small --batch 32 --steps 50 --eval-every 0 --seed 3 --quiet"
# shellcheck disable=SC2086
"$FTX" $dp --db "$work/dp1.db" --run dp >"$work/dp1.txt" 2>&1 || status=1
variants=("" "--bucket-mb 0" "--shard-optimizer")
for i in 0 1 2; do
  # shellcheck disable=SC2086
  timeout 300 mpirun -np 2 -x LD_LIBRARY_PATH "$FTX" $dp ${variants[$i]} --db "$work/dp2_$i.db" --run dp \
    >"$work/dp2_$i.txt" 2>&1 || status=1
done
grep -h "data-parallel\|ftx:" "$work"/dp1.txt "$work"/dp2_*.txt
for i in 0 1 2; do
  echo
  echo "2 processes ${variants[$i]:-(buckets of 25 MB)} against 1:"
  python3 - "$work" "dp2_$i.db" <<'EOF_PY' || status=1
import sqlite3, sys
d = sys.argv[1]
def curve(db, key):
    try:
        c = sqlite3.connect(f"{d}/{db}")
        return [v for (v,) in c.execute("SELECT m.value FROM metrics m JOIN runs r ON r.id = m.run_id "
                                        "WHERE r.name = 'dp' AND m.key = ? ORDER BY m.step", (key,))]
    except sqlite3.Error:
        return []
ok = True
for key in ("train/loss", "train/kl", "train/grad_norm", "perf/tokens_per_s"):
    a, b = curve("dp1.db", key), curve(sys.argv[2], key)
    if key.startswith("perf"):
        mean = lambda v: sum(v[10:]) / max(len(v[10:]), 1)
        print(f"- {key} (steps 11-50): 1 process {mean(a):,.0f}, 2 processes {mean(b):,.0f}")
        continue
    worst = max((abs(x - y) for x, y in zip(a, b)), default=float("inf"))
    print(f"- {key}: {len(a)} and {len(b)} steps, worst apart {worst:.2e}")
    ok = ok and len(a) == 50 and len(b) == 50 and worst <= 1e-4
sys.exit(0 if ok else 1)
EOF_PY
done
echo
echo "## ftx bench train --processes N on the CPU, small preset, batch 64"
echo
echo "| processes | threads each | tok/s | per process | step ms | collectives ms/step | share | gradients |"
echo "|---|---|---|---|---|---|---|---|"
for p in 1 2 4 8; do
  timeout 150 "$FTX" bench train --preset small --batch 64 --warmup 3 --steps 15 --processes "$p" \
    >"$work/b$p.json" 2>"$work/b$p.err" || status=1
  python3 - "$work/b$p.json" <<'EOF_PY' || { status=1; echo "| $p | failed: $(head -c 200 "$work/b$p.err") |"; }
import json, sys
j = json.load(open(sys.argv[1]))
print(f"| {j['processes']} | {j['threads']} | {j['tokens_per_s']:,.0f} | {j['tokens_per_s_per_process']:,.0f} | "
      f"{j['step_ms_median']:.1f} | {j['collective_ms_per_step']:.2f} | {100 * j['collective_share']:.1f} % | "
      f"{j['gradients'] or '-'} |")
EOF_PY
done
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  echo
  echo "## ftx bench train on the GPUs, small preset, batch 64"
  echo
  echo "| processes | bucket MB | tok/s | per process | step ms | collectives ms/step | share | gradients |"
  echo "|---|---|---|---|---|---|---|---|"
  for run in "1 25" "2 25" "2 0"; do
    read -r p mb <<<"$run"
    timeout 150 "$FTX" bench train --device cuda --preset small --batch 64 --warmup 3 --steps 15 --processes "$p" \
      --bucket-mb "$mb" >"$work/g$p$mb.json" 2>"$work/g$p$mb.err" || status=1
    python3 - "$work/g$p$mb.json" "$mb" <<'EOF_PY' || { status=1; echo "| $p | $mb | failed: $(head -c 200 "$work/g$p$mb.err") |"; }
import json, sys
j = json.load(open(sys.argv[1]))
print(f"| {j['processes']} | {sys.argv[2]} | {j['tokens_per_s']:,.0f} | {j['tokens_per_s_per_process']:,.0f} | "
      f"{j['step_ms_median']:.1f} | {j['collective_ms_per_step']:.2f} | {100 * j['collective_share']:.1f} % | "
      f"{j['gradients'] or '-'} |")
EOF_PY
  done
fi
exit $status

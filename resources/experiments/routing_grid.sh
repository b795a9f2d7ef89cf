#!/usr/bin/env bash
# The routing grid of issue 25 (docs/subjective_depth.md): on the synthetic task, plain decoders of
# the small preset (no Z, so that only the routing differs), routed blocks 1 and 3 at each capacity
# for each router, against dense models of 2, 3 and 4 blocks (the compute frontier).
#
#   resources/experiments/routing_grid.sh run     # trains what is missing (a finished run is kept)
#   resources/experiments/routing_grid.sh table   # per run, at its last evaluation: validation CE, training
#                                                 # FLOPs per token, the gates' event AUROCs (mean over blocks),
#                                                 # the share computed, the student's agreement and CE
#   resources/experiments/routing_grid.sh summary [DB...]  # per cell (runs that differ only by seed, in
#                                                 # any of the stores): mean +- standard error over the seeds
#
# Settings (environment): STEPS (default 3000), SEEDS ("1 2 3"), CAPS ("0.125 0.25 0.5 0.75"),
# ROUTERS ("random mod sdt stt stt-th"), G_TH (0.75), DENSE (the dense block counts, "2 3 4"),
# EVAL_EVERY (STEPS / 4), EXP (default ~/ftx-exp/routing), FTX (build/app/ftx).
# Runs are named dense-L<layers>-s<seed>, <router>-<capacity>-s<seed> and, for STT in threshold
# mode (its share is its own, not a capacity), stt-th<G_TH>-s<seed> in $EXP/runs.db.
set -euo pipefail
cd "$(dirname "$0")/../.."
FTX=${FTX:-build/app/ftx}
EXP=${EXP:-$HOME/ftx-exp/routing}
STEPS=${STEPS:-3000}
SEEDS=${SEEDS:-1 2 3}
CAPS=${CAPS:-0.125 0.25 0.5 0.75}
ROUTERS=${ROUTERS:-random mod sdt stt stt-th}
G_TH=${G_TH:-0.75}
DENSE=${DENSE-2 3 4}
EVAL_EVERY=${EVAL_EVERY:-$((STEPS / 4))}
DB=$EXP/runs.db
mkdir -p "$EXP"

done_run() {  # run name: finished in the store
  [[ -f $DB ]] && [[ $(sqlite3 "$DB" "select status from runs where name='$1'" 2>/dev/null) == done ]]
}

train() {  # name, then ftx train flags
  local name=$1
  shift
  if done_run "$name"; then return; fi
  sqlite3 "$DB" "delete from runs where name='$name'" 2>/dev/null || true
  echo "$(date +%T) $name"
  "$FTX" train --run "$name" --db "$DB" --dataset synthetic --preset small --latent-bits 0 --steps "$STEPS" \
    --eval-every "$EVAL_EVERY" --quiet "$@" > "$EXP/$name.log" 2>&1
}

case ${1:-} in
  run)
    for seed in $SEEDS; do
      for layers in $DENSE; do train "dense-L$layers-s$seed" --layers "$layers" --seed "$seed"; done
      for router in $ROUTERS; do
        if [[ $router == stt-th ]]; then
          train "stt-th$G_TH-s$seed" --routing stt --route-mode threshold --g-th "$G_TH" --seed "$seed"
          continue
        fi
        for cap in $CAPS; do train "$router-$cap-s$seed" --routing "$router" --capacity "$cap" --seed "$seed"; done
      done
    done
    ;;
  table)
    sqlite3 -header -column "$DB" "
      select r.name as run,
             (select round(value, 4) from metrics m where m.run_id = r.id and m.key = 'val/ce_prior'
              order by step desc limit 1) as val_ce,
             (select round(value / 1e6, 3) from metrics m where m.run_id = r.id and m.key = 'model/flops_per_token'
              order by step desc limit 1) as mflop_per_token,
             (select round(avg(value), 3) from metrics m where m.run_id = r.id and m.key like 'route/auroc/start/%'
              and m.step = (select max(step) from metrics n where n.run_id = r.id)) as auroc_start,
             (select round(avg(value), 3) from metrics m where m.run_id = r.id and m.key like 'route/auroc/letter/%'
              and m.step = (select max(step) from metrics n where n.run_id = r.id)) as auroc_letter,
             (select round(avg(value), 3) from metrics m where m.run_id = r.id and m.key like 'route/auroc/noise/%'
              and m.step = (select max(step) from metrics n where n.run_id = r.id)) as auroc_noise,
             (select round(value, 3) from metrics m where m.run_id = r.id and m.key = 'route/capacity'
              order by step desc limit 1) as computed,
             (select round(value, 3) from metrics m where m.run_id = r.id and m.key = 'route/student/agree'
              order by step desc limit 1) as student_agree,
             (select round(value, 3) from metrics m where m.run_id = r.id and m.key = 'route/student/capacity'
              order by step desc limit 1) as student_computed,
             (select round(value, 4) from metrics m where m.run_id = r.id and m.key = 'route/teacher/ce'
              order by step desc limit 1) as teacher_ce,
             (select round(value, 4) from metrics m where m.run_id = r.id and m.key = 'route/student/ce'
              order by step desc limit 1) as student_ce,
             r.status
      from runs r order by r.name"
    ;;
  summary)
    shift
    python3 - "${@:-$DB}" <<'PY'
import math, re, sqlite3, sys
keys = {"val": "val/ce_prior", "mflop": "model/flops_per_token", "share": "route/capacity",
        "student_share": "route/student/capacity", "agree": "route/student/agree",
        "teacher_ce": "route/teacher/ce", "student_ce": "route/student/ce"}
cells = {}
for db in sys.argv[1:]:
    con = sqlite3.connect(db)
    for rid, name in con.execute("select id, name from runs where status = 'done'"):
        cell = re.sub(r"-s[0-9]+$", "", name)
        row = {}
        for k, key in keys.items():
            v = con.execute("select value from metrics where run_id = ? and key = ? order by step desc limit 1",
                            (rid, key)).fetchone()
            if v: row[k] = v[0] / (1e6 if k == "mflop" else 1)
        for ev in ("start", "letter", "noise"):
            v = con.execute("select avg(value) from metrics where run_id = ? and key like ? and step = "
                            "(select max(step) from metrics where run_id = ?)", (rid, f"route/auroc/{ev}/%", rid)).fetchone()
            if v and v[0] is not None: row["auroc_" + ev] = v[0]
        cells.setdefault(cell, []).append(row)
cols = ["val", "mflop", "share", "student_share", "agree", "teacher_ce", "student_ce", "auroc_start", "auroc_letter", "auroc_noise"]
print("| cell | seeds | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 2) + "|")
def fmt(xs):
    if not xs: return ""
    m = sum(xs) / len(xs)
    if len(xs) < 2: return f"{m:.4f}"
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))
    return f"{m:.4f} +- {se:.4f}"
for cell in sorted(cells):
    rows = cells[cell]
    print(f"| {cell} | {len(rows)} | " + " | ".join(fmt([r[c] for r in rows if c in r]) for c in cols) + " |")
PY
    ;;
  *)
    sed -n '2,16p' "$0"
    exit 1
    ;;
esac

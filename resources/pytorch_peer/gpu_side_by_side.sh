#!/usr/bin/env bash
# ftx's CUDA backend against the eager PyTorch peer (bench_pytorch.py) on one GPU, side by side in
# one run: training, then generation, then the binary-mapper micro-benchmark; prints markdown tables. Run from the
# repository root on a machine with a GPU, the CUDA toolkit and ftx's build dependencies:
#     resources/pytorch_peer/gpu_side_by_side.sh
# It builds ftx with the CUDA backend into build-gpu (tests off: GoogleTest is not needed) and
# keeps every JSON report and log under build-gpu/bench/. PyTorch rows are skipped, with a note,
# when torch with CUDA cannot be imported. The table needs python3's standard library only.
# Environment: WARMUP (5), STEPS (20) for every training row; GEN_WARMUP (2), GEN_STEPS (10) runs
# for every generation row; SKIP_BUILD=1 reuses build-gpu; FTX, another ftx binary (with
# SKIP_BUILD=1: resources/gpu/on_device.sh runs the one it unpacked); BENCH_OUT, where the reports
# go (build-gpu/bench).
# Exit code 1 when the build or any ftx run failed (the table is printed first).
#
# Rows: the small preset (tf32, batch 64) as the baseline decoder, H = 8 and H = 16; a larger
# shape (12 layers, D = 768, 12 heads, SwiGLU 2048, T = 1024, batch 8, bf16) at H = 16 and as the
# baseline decoder (the Free Transformer's overhead); generation of the small preset (tf32, batch
# 64, len 66, greedy, Z from the prior) as the baseline decoder and H = 8: ftx bench generate (KV
# cache) against bench_pytorch.py --generate (a full forward over the prefix per position); bench
# mapper at its default shape.
set -uo pipefail

BUILD=build-gpu
OUT="${BENCH_OUT:-$BUILD/bench}"
WARMUP="${WARMUP:-5}"
STEPS="${STEPS:-20}"
GEN_WARMUP="${GEN_WARMUP:-2}"
GEN_STEPS="${GEN_STEPS:-10}"
FTX="${FTX:-$BUILD/app/ftx}"
PEER=resources/pytorch_peer/bench_pytorch.py

if [ ! -f CMakeLists.txt ] || [ ! -f "$PEER" ]; then
  echo "run from the repository root" >&2
  exit 1
fi
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFTX_CUDA=ON -DFTX_STUDIO=OFF \
    -DFTX_BUILD_TESTS=OFF || exit 1
  cmake --build "$BUILD" -j"$(nproc)" --target ftx || exit 1
fi
mkdir -p "$OUT"

have_torch=1
if ! python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  have_torch=0
  echo "note: torch with CUDA is not importable here: PyTorch rows are skipped" >&2
fi

SMALL="--batch 64 --precision tf32"
LARGE="--layers 12 --dim 768 --heads 12 --ffn 2048 --seq-len 1024 --batch 8 --precision bf16"

failed=0  # ftx runs that failed: the exit code after the table

# pair KIND NAME "FLAGS": ftx bench KIND (train or generate) and, when available, the PyTorch peer
# (with --generate for generation) on the same shape; JSON and logs under $OUT/NAME.*.
pair() {
  local kind=$1 name=$2 flags=$3 warmup=$WARMUP steps=$STEPS peer_mode=()
  if [ "$kind" = generate ]; then warmup=$GEN_WARMUP steps=$GEN_STEPS peer_mode=(--generate); fi
  echo "== $name: $flags" >&2
  # shellcheck disable=SC2086
  "$FTX" bench "$kind" --device cuda --warmup "$warmup" --steps "$steps" $flags \
    >"$OUT/$name.ftx.json" 2>"$OUT/$name.ftx.err" || {
    echo "   ftx failed: see $OUT/$name.ftx.err" >&2
    failed=$((failed + 1))
  }
  rm -f "$OUT/$name.torch.json"
  if [ "$have_torch" = 1 ]; then
    # shellcheck disable=SC2086
    python3 "$PEER" "${peer_mode[@]}" --device cuda --warmup "$warmup" --steps "$steps" $flags \
      >"$OUT/$name.torch.json" 2>"$OUT/$name.torch.err" || echo "   PyTorch failed: see $OUT/$name.torch.err" >&2
  fi
}

GEN="--batch 64 --len 66 --precision tf32"

pair train small-baseline "--latent-bits 0 $SMALL"
pair train small-h8 "--latent-bits 8 $SMALL"
pair train small-h16 "--latent-bits 16 $SMALL"
pair train large-baseline "--latent-bits 0 $LARGE"
pair train large-h16 "--latent-bits 16 $LARGE"
pair generate gen-small-baseline "--latent-bits 0 $GEN"
pair generate gen-small-h8 "--latent-bits 8 $GEN"
for prec in tf32 bf16; do
  echo "== mapper (default shape), $prec" >&2
  if ! "$FTX" bench mapper --device cuda --precision $prec >"$OUT/mapper-$prec.ftx.json" 2>"$OUT/mapper-$prec.ftx.err"; then
    echo "   ftx bench mapper failed: see $OUT/mapper-$prec.ftx.err" >&2
    failed=$((failed + 1))
  fi
done

python3 - "$OUT" "$have_torch" <<'EOF'
import json, os, sys

out, have_torch = sys.argv[1], sys.argv[2] == "1"

def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def num(x, fmt):
    return "-" if x is None else format(x, fmt)

# One markdown table: per row ftx's and PyTorch's tokens/s, the speed-up, and last(ftx report).
def table(rows, last_header, last):
    print(f"| config | ftx tok/s | PyTorch tok/s | speed-up | {last_header} |")
    print("|---|---|---|---|---|")
    for name, label in rows:
        f, t = load(name + ".ftx.json"), load(name + ".torch.json")
        ftx_tps = f and f["tokens_per_s"]
        torch_tps = t and t["tokens_per_s"]
        torch_cell = num(torch_tps, ",.0f") if have_torch else "skipped (no torch+CUDA)"
        speedup = num(ftx_tps / torch_tps, ".2f") + "x" if ftx_tps and torch_tps else "-"
        print(f"| {label} | {num(ftx_tps, ',.0f')} | {torch_cell} | {speedup} | {last(f)} |")

def mfu_cell(f):
    mfu = f and f["mfu"]
    return num(mfu and 100 * mfu, ".1f") + ("%" if mfu else "")

rows = [("small-baseline", "small, baseline decoder (H = 0), tf32, batch 64"),
        ("small-h8", "small, H = 8, tf32, batch 64"),
        ("small-h16", "small, H = 16, tf32, batch 64"),
        ("large-baseline", "12 x 768, T = 1024, baseline decoder, bf16, batch 8"),
        ("large-h16", "12 x 768, T = 1024, H = 16, bf16, batch 8")]
f0 = load("small-baseline.ftx.json") or {}
print(f"\nGPU: {f0.get('device', '?')}\n")
table(rows, "ftx MFU", mfu_cell)

base, ft = load("large-baseline.ftx.json"), load("large-h16.ftx.json")
if base and ft:
    print(f"\nFree Transformer overhead at 12 x 768, T = 1024 (ftx, bf16): H = 16 runs at "
          f"{100 * ft['tokens_per_s'] / base['tokens_per_s']:.1f}% of the baseline decoder's tokens/s "
          f"(step {ft['step_ms_median']:.1f} ms vs {base['step_ms_median']:.1f} ms).")
gen_rows = [("gen-small-baseline", "small, baseline decoder (H = 0), tf32, batch 64, len 66"),
            ("gen-small-h8", "small, H = 8, tf32, batch 64, len 66")]
print("\nGeneration, greedy (ftx: KV cache; PyTorch: full forward over the prefix per position):\n")
table(gen_rows, "ftx ms/position", lambda f: num(f and f["ms_per_position"], ".3f"))

for prec in ("tf32", "bf16"):
    m = load(f"mapper-{prec}.ftx.json")
    if not m:
        continue
    print(f"\nbench mapper, N = {m['tokens']}, C = {m['dim']}, H = {m['latent_bits']} ({m['precision']} GEMM):\n")
    print("| op | median ms | TFLOP/s |")
    print("|---|---|---|")
    print(f"| binary_mapper_backward | {m['mapper_ms_median']:.3f} | {m['mapper_tflops']:.3g} |")
    print(f"| matmul_forward, same shape | {m['gemm_ms_median']:.3f} | {m['gemm_tflops']:.3g} |")
    print(f"\nmapper_vs_gemm = gemm_ms / mapper_ms = {m['mapper_vs_gemm']:.2f} (target >= 0.5)")
print(f"\nMFU convention: {f0.get('flops_convention', '?')}; reports in {out}/")
EOF
[ "$failed" = 0 ] || { echo "$failed ftx run(s) failed" >&2; exit 1; }

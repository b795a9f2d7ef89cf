#!/usr/bin/env bash
# Runs on a GPU machine, from the repository root, what resources/gpu/make_bundle.sh packed:
# the GPU parity tests (test_backend_ops), then resources/pytorch_peer/gpu_side_by_side.sh with
# the packed ftx against the PyTorch there, then ftx bench ops (where a step's time goes), then
# routed training (each router at capacity 1/2) against the dense model at the large shape, then
# routed generation against the dense model, then data-parallel training against one process
# (resources/gpu/dp_check.sh: NCCL with two GPUs, the host path with one).
# Into $OUT (the device tool's folder that comes back, at most 8 files) or, without it,
# gpu-results/: device.txt, test_backend_ops.log, bench.md (the tables) and bench.tar.gz (every
# JSON report and error log). Exit 0 only when every GPU test ran and passed and every benchmark
# ran.
set -uo pipefail

OUT="${OUT:-gpu-results}"
mkdir -p "$OUT"
if [ ! -f .gpu/bundle.tar.xz ]; then
  echo "on_device: no .gpu/bundle.tar.xz (run resources/gpu/make_bundle.sh here, carry .gpu)" >&2
  exit 1
fi
root=$(mktemp -d)
tar -C "$root" -xJf .gpu/bundle.tar.xz

# cudart and cuBLAS of major version 13 and NCCL 2: the CUDA toolkit's, else the ones PyTorch's
# wheels carry.
cuda_libs=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
cudart=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcudart.so.13*' 2>/dev/null | head -1)
nccl=$(find /usr/local/cuda*/ /usr/lib /opt /usr/local/lib -name 'libnccl.so.2*' 2>/dev/null | head -1)
LD_LIBRARY_PATH="$root/lib:$(dirname "${cuda_libs:-/}"):$(dirname "${cudart:-/}"):$(dirname "${nccl:-/}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

{
  echo "bundle: commit $(cat "$root/commit" 2>/dev/null), built with $(cat "$root/nvcc-version")"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$root/bin/ftx" | grep -E 'not found|cublas|cudart|nccl'
} 2>&1 | tee "$OUT/device.txt"

"$root/bin/test_backend_ops" 2>&1 | tee "$OUT/test_backend_ops.log" |
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|tests? ran'
tests=${PIPESTATUS[0]}
skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$OUT/test_backend_ops.log")
if [ "$tests" = 0 ] && [ -n "$skipped" ]; then  # skipping is for machines without a GPU
  echo "on_device: $skipped GPU tests skipped on a machine meant to have a GPU" | tee -a "$OUT/device.txt"
  tests=1
fi

FTX="$root/bin/ftx" SKIP_BUILD=1 BENCH_OUT="$root/bench" bash resources/pytorch_peer/gpu_side_by_side.sh 2>&1 |
  tee "$OUT/bench.md"
bench=${PIPESTATUS[0]}
# Where a step's time goes on the GPU (ftx bench ops): the small preset and the large shape.
{
  echo
  echo "## ftx bench ops (each op of a step timed alone)"
  for shape in "small|--batch 64 --precision tf32 --latent-bits 16" \
    "large|--layers 12 --dim 768 --heads 12 --ffn 2048 --seq-len 1024 --batch 8 --precision bf16 --latent-bits 16"; do
    name=${shape%%|*}
    echo; echo "### $name: ${shape#*|}"; echo; echo '```'
    # shellcheck disable=SC2086
    "$root/bin/ftx" bench ops --device cuda ${shape#*|} >"$root/bench/ops-$name.json" 2>"$root/bench/ops-$name.txt" ||
      bench=1
    cat "$root/bench/ops-$name.txt"; echo '```'
  done
} >"$root/ops.md" 2>&1  # a group without a pipe runs in this shell: bench=1 stays set
tee -a "$OUT/bench.md" <"$root/ops.md"
# Routed compute (issue 25) at the large shape, baseline decoder: each router at capacity 1/2
# against the dense model, ftx alone (the PyTorch peer has no routing).
{
  echo
  echo "## Routed compute, 12 x 768, T = 1024, H = 0, bf16, batch 8 (capacity 0.5)"
  echo
  for router in dense random mod sdt stt; do
    flags="--layers 12 --dim 768 --heads 12 --ffn 2048 --seq-len 1024 --batch 8 --precision bf16 --latent-bits 0"
    [ "$router" = dense ] || flags="$flags --routing $router --capacity 0.5"
    # shellcheck disable=SC2086
    "$root/bin/ftx" bench train --device cuda --warmup 5 --steps 20 $flags \
      >"$root/bench/routed-$router.json" 2>"$root/bench/routed-$router.err" || bench=1
  done
  python3 - "$root/bench" <<'EOF_PY'
import json, os, sys
d = sys.argv[1]
def load(r):
    try:
        return json.load(open(os.path.join(d, f"routed-{r}.json")))
    except (OSError, ValueError):
        return None
dense = load("dense")
print("| model | tok/s | step ms | MFLOP/token | tok/s vs dense | FLOPs vs dense |")
print("|---|---|---|---|---|---|")
for r in ("dense", "random", "mod", "sdt", "stt"):
    f = load(r)
    if not f:
        print(f"| {r} | failed | | | | |")
        continue
    rel = lambda k: f"{f[k] / dense[k]:.3f}" if dense else "-"
    print(f"| {r} | {f['tokens_per_s']:,.0f} | {f['step_ms_median']:.2f} | "
          f"{f['model_flops_per_token'] / 1e6:.1f} | {rel('tokens_per_s')} | {rel('model_flops_per_token')} |")
EOF_PY
} >"$root/routed.md" 2>&1
tee -a "$OUT/bench.md" <"$root/routed.md"
# Routed generation (the student path with routed KV caches) against the dense model of the same
# shape, in one command each: the small preset, no Z, 8 sequences over 256 positions.
{
  echo
  echo "## Routed generation, small preset, H = 0, batch 8, len 256 (capacity 0.5)"
  echo
  for router in random mod sdt; do
    "$root/bin/ftx" bench generate --device cuda --preset small --latent-bits 0 --routing "$router" --capacity 0.5 \
      --batch 8 --len 256 --steps 5 --warmup 1 >"$root/bench/gen-$router.json" 2>"$root/bench/gen-$router.err" ||
      bench=1
  done
  python3 - "$root/bench" <<'EOF_PY'
import json, os, sys
d = sys.argv[1]
print("| routing | routed share | tok/s | dense tok/s | speed vs dense | FLOPs vs dense | ms/position |")
print("|---|---|---|---|---|---|---|")
for r in ("random", "mod", "sdt"):
    try:
        f = json.load(open(os.path.join(d, f"gen-{r}.json")))
    except (OSError, ValueError):
        print(f"| {r} | failed | | | | | |")
        continue
    print(f"| {r} | {f['routed_share']:.3f} | {f['tokens_per_s']:,.0f} | {f['dense']['tokens_per_s']:,.0f} | "
          f"{f['speed_vs_dense']:.2f}x | {f['flops_vs_dense']:.2f} | {f['ms_per_position']:.3f} |")
EOF_PY
} >"$root/gen.md" 2>&1
tee -a "$OUT/bench.md" <"$root/gen.md"
# Data-parallel training (issue 26): 1 process against 2 on the GPUs, and the host path's scaling
# over this machine's cores (resources/gpu/dp_check.sh).
echo >"$root/dp.md"
FTX="$root/bin/ftx" bash resources/gpu/dp_check.sh >>"$root/dp.md" 2>&1 || bench=1
tee -a "$OUT/bench.md" <"$root/dp.md"
tar -C "$root" -czf "$OUT/bench.tar.gz" bench
echo "on_device: test_backend_ops exit $tests, benchmarks exit $bench" | tee -a "$OUT/device.txt"
[ "$tests" = 0 ] && [ "$bench" = 0 ]

#!/usr/bin/env bash
# Builds ftx and test_backend_ops with the CUDA backend here and packs them, with the shared
# libraries they need that a GPU machine's CUDA image may lack, into .gpu/bundle.tar.xz (ignored
# by git). resources/gpu/on_device.sh unpacks and runs it there, so that one call of the device
# tool (which carries .gpu along) runs the GPU tests and the side-by-side benchmarks without
# building anything on the GPU machine:
#     resources/gpu/make_bundle.sh
#     device run, carry [".gpu"]:  bash resources/gpu/on_device.sh
# Packed: every library ldd resolves except glibc's, the GCC runtime's and CUDA's own (cudart,
# cuBLAS, NCCL: 218 MB, over the device tool's 64 MiB), which the GPU machine's CUDA toolkit or
# PyTorch's nvidia wheels provide; this machine's nvcc must have the major
# version of the GPU machine's (13 here and there on 2026-11-21).
# Environment: BUILD (build-gpu) is the CMake build directory, reused when configured.
set -euo pipefail

BUILD="${BUILD:-build-gpu}"
[ -f CMakeLists.txt ] || { echo "run from the repository root" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "make_bundle: no nvcc on this machine" >&2; exit 1; }

# FTX_NATIVE=OFF: these binaries run on the GPU machine, whose CPU may lack this one's instructions
# (also passed to a build directory configured before, which would otherwise keep -march=native).
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFTX_CUDA=ON -DFTX_STUDIO=OFF -DFTX_NATIVE=OFF
else
  cmake -S . -B "$BUILD" -DFTX_NATIVE=OFF >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc)" --target ftx test_backend_ops
# grep without -q: with pipefail, grep -q quitting at the first match can fail ldd with SIGPIPE.
if ! ldd "$BUILD/app/ftx" | grep libcublas >/dev/null; then
  echo "make_bundle: $BUILD was configured without the CUDA backend" >&2
  exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$BUILD/app/ftx" "$BUILD/tests/test_backend_ops" "$stage/bin/"
ldd "$stage/bin/ftx" "$stage/bin/test_backend_ops" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
nvcc --version | tail -1 >"$stage/nvcc-version"
git rev-parse --short HEAD >"$stage/commit" 2>/dev/null || true

mkdir -p .gpu
tar -C "$stage" -cJf .gpu/bundle.tar.xz .
echo "make_bundle: .gpu/bundle.tar.xz ($(du -h .gpu/bundle.tar.xz | cut -f1)):" >&2
tar -tJf .gpu/bundle.tar.xz | grep -v '/$' | sed 's/^/  /' >&2

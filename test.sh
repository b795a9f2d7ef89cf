#!/usr/bin/env bash
# ./test.sh: install what is missing (Debian packages), build, run every test. Idempotent; fast
# when nothing changed. Extra arguments go to ctest (e.g. ./test.sh -R Golden).
set -euo pipefail
cd "$(dirname "$0")"
source ./resources/setup.sh
ftx_install_packages
ftx_build
cd build
ctest --output-on-failure --timeout 900 -j"$(nproc)" "$@"

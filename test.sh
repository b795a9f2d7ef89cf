#!/usr/bin/env bash
# ./test.sh: install what is missing (Debian packages), fetch the real model the tests use into
# ~/.cache/ftx/models ($FTX_MODEL_CACHE) and HumanEval into ~/.cache/ftx/data ($FTX_DATA_CACHE),
# build, run every test. Idempotent; fast when nothing changed. Extra arguments go to
# ctest (e.g. ./test.sh -R Golden).
set -euo pipefail
cd "$(dirname "$0")"
source ./resources/setup.sh
ftx_install_packages
ftx_fetch_models
ftx_fetch_data
export FTX_MODEL_CACHE=${FTX_MODEL_CACHE:-$HOME/.cache/ftx/models}
export FTX_DATA_CACHE=${FTX_DATA_CACHE:-$HOME/.cache/ftx/data}
export FTX_REQUIRE_MODELS=1  # tests/real_model.h: a missing model fails the test instead of skipping it
ftx_build
cd build
ctest --output-on-failure --timeout 900 -j"$(nproc)" "$@"

#!/usr/bin/env bash
# ./run.sh: install what is missing (Debian packages) and the real model (resources/setup.sh,
# ftx_fetch_models), build, then run the main job: the studio (ftx-studio) where a display
# exists, else the terminal demo (ftx demo). Idempotent.
set -euo pipefail
cd "$(dirname "$0")"
source ./resources/setup.sh
ftx_install_packages
ftx_fetch_models
ftx_fetch_data
ftx_build
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x build/app/ftx-studio ]]; then
  exec build/app/ftx-studio "$@"
fi
exec build/app/ftx demo "$@"

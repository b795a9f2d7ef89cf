#!/usr/bin/env bash
# ./run.sh: install what is missing (Debian packages) and the real model (resources/setup.sh,
# ftx_fetch_models), build, bring the shipped Figure 4 and coin-flip models into the workspace's
# run store (ftx import: runs already there are kept), then run the main job: the studio
# (ftx-studio) on the Figure 4 lesson where a display exists, else the terminal demo (ftx demo,
# which imports them too). Idempotent.
set -euo pipefail
cd "$(dirname "$0")"
source ./resources/setup.sh
ftx_install_packages
ftx_fetch_models
ftx_fetch_data
ftx_build
if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x build/app/ftx-studio ]]; then
  build/app/ftx import --db workspace/runs.db resources/models/*/ >/dev/null ||
    echo "run.sh: the shipped models were not imported (above); the studio opens without them" >&2
  exec build/app/ftx-studio --db workspace/runs.db --view figure4 "$@"
fi
exec build/app/ftx demo "$@"

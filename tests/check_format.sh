#!/usr/bin/env bash
# ctest's format check: every C++ and CUDA source follows .clang-format (clang-format 14, Debian 12).
# Fix a failure with: clang-format -i $(git ls-files '*.cpp' '*.h' '*.cu')
set -euo pipefail
cd "$1"
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' 2>/dev/null || find app core datasets kernels tests views -name '*.cpp' -o -name '*.h' -o -name '*.cu')
clang-format --dry-run --Werror "${files[@]}"

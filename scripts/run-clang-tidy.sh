#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy: bugprone-*, performance-*, cognitive
# complexity <= 40) over hpsearch's own sources (not tests/ or bench/), with
# the compile commands of a configured build folder (default build/release),
# one process per core. Exit 1 if any check fires. `make check-tidy` (part
# of `make test`) runs it. About 15 minutes of CPU (80 files; 8 minutes on
# 2 cores): most of it is clang parsing and matching the big headers
# (nlohmann/json, spdlog/fmt, cppzmq) in every file; LibTorch's files
# (objectives/torch_*) are left out.
#
#   scripts/run-clang-tidy.sh [BUILD_DIR] [FILE...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir="${1:-build/release}"
shift || true
if [[ ! -f "$build_dir/compile_commands.json" ]]; then
  echo "run-clang-tidy: $build_dir/compile_commands.json not found (configure that build first)" >&2
  exit 2
fi
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files 'search/*.cpp' 'algorithms/*.cpp' 'coordinator/*.cpp' \
    'protocol/*.cpp' 'workers/*.cpp' 'objectives/*.cpp' 'cli/*.cpp' | grep -v '/torch_')
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# -Wno-unknown-warning-option: GCC-only flags in the compile commands.
# -Wno-sign-conversion: clang's -Wconversion includes it, GCC's does not;
# the build leaves it off for both (CMakeLists.txt).
if ! printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 \
    clang-tidy --quiet -p "$build_dir" --extra-arg=-Wno-unknown-warning-option \
    --extra-arg=-Wno-sign-conversion >"$log" 2>&1; then
  grep -E '(warning|error):' "$log" | grep -v 'warnings generated' | sort -u
  echo "run-clang-tidy: checks failed in ${#files[@]} files (see above)"
  exit 1
fi
echo "run-clang-tidy: ${#files[@]} files clean"

#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy: bugprone-*, performance-*, cognitive
# complexity <= 40) over hpsearch's own sources (not tests/ or bench/), with
# the compile commands of a configured build folder (default build/release),
# one process per core. Exit 1 if any check fires. `make check-tidy` (part
# of `make test`) runs it. A file whose inputs are unchanged since a clean
# check is not checked again (the cache below). A whole run is about 15
# minutes of CPU (80 files; 8 minutes on 2 cores): most of it is matching
# every check over the big headers (nlohmann/json, spdlog/fmt, cppzmq) in
# every file, which clang-tidy 14 cannot skip; LibTorch's files
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
    'protocol/*.cpp' 'workers/*.cpp' 'objectives/*.cpp' 'cli/*.cpp' 'report/*.cpp' |
    grep -v '/torch_')
fi
log="$(mktemp)"
keys="$(mktemp)"
todo="$(mktemp)"
clean="$(mktemp)"
trap 'rm -f "$log" "$keys" "$todo" "$clean"' EXIT
# -Wno-unknown-warning-option: GCC-only flags in the compile commands.
# -Wno-sign-conversion: clang's -Wconversion includes it, GCC's does not;
# the build leaves it off for both (CMakeLists.txt).
extra="--extra-arg=-Wno-unknown-warning-option --extra-arg=-Wno-sign-conversion"

# The result cache (.ci/clang-tidy-clean.txt, committed): "KEY FILE" for each
# file found clean with exactly the inputs that KEY hashes (its text, the
# headers of ours it includes, its compile command, .clang-tidy, the
# clang-tidy and library versions: scripts/tidy-cache.py). A file whose key
# is listed is not parsed again; any change to what it reads gives a new key
# and a real run. Each file found clean is recorded, also when others have
# findings. HPSEARCH_TIDY_CACHE=0 checks every file and records nothing.
cache=.ci/clang-tidy-clean.txt
use_cache="${HPSEARCH_TIDY_CACHE:-1}"
python3=/usr/bin/python3
[[ -x "$python3" ]] || python3=python3
"$python3" scripts/tidy-cache.py keys "$build_dir" --extra "$extra" -- "${files[@]}" >"$keys"
if [[ "$use_cache" != 0 && -f "$cache" ]]; then
  awk 'NR == FNR { known[$1 " " $2] = 1; next } !(($1 " " $2) in known)' "$cache" "$keys" >"$todo"
else
  cp "$keys" "$todo"
fi
n_todo=$(wc -l <"$todo")
n_cached=$((${#files[@]} - n_todo))

# One clang-tidy per file, one per core. A clean file's "KEY FILE" goes to
# $clean, the findings of the others to $log (one append each).
tidy_one() {
  local key="$1" name="$2" out
  # shellcheck disable=SC2086 # $extra: two words
  if out="$(clang-tidy --quiet -p "$build_dir" $extra "$name" 2>&1)"; then
    [[ "$key" == none ]] || printf '%s %s\n' "$key" "$name" >>"$clean"
  else
    printf '%s\n' "$out" >>"$log"
    return 1
  fi
}
export -f tidy_one
export build_dir extra clean log
status=0
if [[ "$n_todo" -gt 0 ]]; then
  xargs -P "$(nproc)" -L 1 bash -c 'tidy_one "$@"' _ <"$todo" || status=1
fi
n_clean=$(wc -l <"$clean")
if [[ "$use_cache" != 0 && "$n_clean" -gt 0 ]]; then
  mkdir -p "$(dirname "$cache")"
  { if [[ -f "$cache" ]]; then awk 'NR == FNR { fresh[$2] = 1; next } !($2 in fresh)' "$clean" "$cache"; fi
    cat "$clean"; } | sort -k2 >"$cache.new"
  mv "$cache.new" "$cache"
fi
if [[ "$status" != 0 ]]; then
  grep -E '(warning|error):' "$log" | grep -v 'warnings generated' | sort -u
  echo "run-clang-tidy: checks failed in $((n_todo - n_clean)) of ${#files[@]} files (see above)"
  exit 1
fi
echo "run-clang-tidy: ${#files[@]} files clean ($n_todo checked, $n_cached unchanged since a clean check: $cache)"

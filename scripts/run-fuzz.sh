#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (built by `cmake --build --preset
# fuzz`), each for SECONDS on a copy of its seed corpus tests/fuzz/corpus/<target>
# (the repository is not modified), and prints one line per target with the
# runs executed. Fails (exit 1) if any target found a crash, UB, a leak, a
# timeout or an out-of-memory; the input is kept under BUILD/run/<target>/
# and the line says how to replay it. Used by `make test-fuzz`.
#
#   scripts/run-fuzz.sh [SECONDS] [TARGET...]    (default: 60 s, every target)
#
# Environment: FUZZ_JOBS targets at once (default 1), FUZZ_SEED (default 1;
# the runs are only reproducible as far as the time limit allows),
# FUZZ_BUILD_DIR (default build/fuzz, the fuzz preset at -O1; `make test-fuzz`
# uses build/asan, where the asan preset builds the same targets).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds="${1:-60}"
[[ $# -gt 0 ]] && shift
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(protocol space_json report_line metrics_line param_set)
build="${FUZZ_BUILD_DIR:-build/fuzz}"
jobs="${FUZZ_JOBS:-1}"
seed="${FUZZ_SEED:-1}"
run_dir="$build/run"

# Per target: the largest single allocation allowed (MB; a frame is at most
# 4 KiB here, so protocol decoding has no reason to allocate 2 MB at once)
# and the dictionary.
declare -A malloc_mb=([protocol]=2 [space_json]=64 [report_line]=64 [metrics_line]=64 [param_set]=64)
declare -A dict=([space_json]=tests/fuzz/json.dict [report_line]=tests/fuzz/json.dict [metrics_line]=tests/fuzz/metrics.dict)

run_one() {
  local t="$1" dir="$run_dir/$1"
  local bin="$build/tests/fuzz/fuzz_$t"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp tests/fuzz/corpus/"$t"/* "$dir/corpus/"
  local args=(-max_total_time="$seconds" -seed="$seed" -timeout=10 -rss_limit_mb=1024
              -malloc_limit_mb="${malloc_mb[$t]:-64}" -print_final_stats=1
              -artifact_prefix="$dir/artifacts/")
  [[ -n "${dict[$t]:-}" ]] && args+=(-dict="${dict[$t]}")
  local rc=0
  "$bin" "${args[@]}" "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

if [[ ! -x "$build/tests/fuzz/fuzz_${targets[0]}" ]]; then
  echo "run-fuzz: $build/tests/fuzz/fuzz_${targets[0]} is missing; build it first:" \
       "cmake --preset fuzz && cmake --build --preset fuzz" \
       "(or FUZZ_BUILD_DIR=build/asan after a build of the asan preset)" >&2
  exit 2
fi

start=$SECONDS
for t in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
  echo "run-fuzz: $t for ${seconds} s"
  run_one "$t" &
done
wait

failed=0
for t in "${targets[@]}"; do
  dir="$run_dir/$t"
  rc="$(cat "$dir/rc")"
  runs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$dir/log" | tail -1 | awk '{print $2}')"
  crashes=("$dir"/artifacts/*)
  [[ -e "${crashes[0]}" ]] || crashes=()
  seeds="$(ls tests/fuzz/corpus/"$t" | wc -l)"
  inputs="$(ls "$dir/corpus" | wc -l)"
  if [[ "$rc" == 0 && ${#crashes[@]} -eq 0 ]]; then
    echo "fuzz $t: OK: ${runs:-?} runs in ${seconds} s, 0 crashes (corpus $seeds -> $inputs inputs)"
  else
    failed=1
    echo "fuzz $t: FAILED (exit $rc) after ${runs:-?} runs; log: $dir/log"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|fuzz_[a-z_]+: )' "$dir/log" | head -5 | sed 's/^/  /'
    for c in "${crashes[@]}"; do
      echo "  input: $c (replay: $build/tests/fuzz/fuzz_$t $c)"
    done
  fi
done
echo "run-fuzz: ${#targets[@]} target(s) in $((SECONDS - start)) s"
exit "$failed"

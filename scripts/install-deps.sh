#!/usr/bin/env bash
# Installs the Debian 12 packages hpsearch needs. Idempotent: only missing
# packages are installed (apt-get update runs only then), and nothing is
# printed when everything is already there. Uses sudo when not run as root.
#
#   scripts/install-deps.sh                  profile "all": build, test, docs,
#                                            benchmarks (make test, make docs)
#   scripts/install-deps.sh --profile demo   only what `make demo` needs: build
#                                            hpsearch (LibTorch objectives
#                                            included), run the Fashion-MNIST
#                                            study and write its report; no
#                                            test, docs, Slurm or browser
#                                            packages
#   scripts/install-deps.sh [--profile P] --list
#                                            print the profile's packages, one a
#                                            line, and install nothing
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

profile=all
list_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --profile)
      [[ $# -ge 2 ]] || { echo "install-deps: --profile needs a value (demo or all)" >&2; exit 2; }
      profile="$2"
      shift 2
      ;;
    --profile=*) profile="${1#--profile=}"; shift ;;
    --list) list_only=1; shift ;;
    *) echo "install-deps: unknown argument '$1' (--profile demo|all, --list)" >&2; exit 2 ;;
  esac
done
if [[ "$profile" != demo && "$profile" != all ]]; then
  echo "install-deps: --profile must be demo or all, got '$profile'" >&2
  exit 2
fi

# Profile "demo": building hpsearch and hpsearch-torch (tests and
# benchmarks off: CMake then needs no GoogleTest) and running the demo study.
DEMO_PACKAGES=(
  build-essential cmake ninja-build pkg-config  # toolchain
  libtorch-dev libopenblas0-pthread             # LibTorch objectives
  libgloo-dev                                   # LibTorch objectives on several processes (c10d ProcessGroupGloo headers)
  libzmq3-dev cppzmq-dev libcereal-dev          # coordinator <-> worker protocol
  libsqlite3-dev sqlite3                        # storage
  libcli11-dev nlohmann-json3-dev               # CLI, space.json
  libspdlog-dev libfmt-dev zlib1g-dev           # logging, data loading
  libboost-dev                                  # Sobol sequence of the QMC sampler (Boost.Random, headers)
  libcpp-httplib-dev                            # hpsearch dashboard (HTTP server)
  libre2-dev                                    # command objective: metrics regexes
  libxxhash-dev                                 # checksums of checkpoint snapshots (XXH3)
  dataset-fashion-mnist                         # data of the Fashion-MNIST objectives
)
# Profile "all" adds what the tests, the docs and the benchmarks need.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev                     # tests
  python3-optuna python3-sklearn python3-xgboost python3-plotly python3-pandas # bench/ comparisons (xgboost: bench/hpo_suite.py; plotly: Optuna's plots; pandas: trials_dataframe in the docs); importances checked against Optuna (fANOVA)
  clang clang-format clang-tidy                 # format check, analysis, fuzzing
  libclang-rt-14-dev                            # libFuzzer and sanitizer runtimes of clang 14
  slurmctld slurmd slurm-client munge           # tests/slurm_cluster_test.sh (--launcher slurm)
  chromium                                      # report and docs tests: pages in a headless browser
  python3-sphinx python3-myst-parser python3-sphinx-rtd-theme # make docs: the site from docs/*.md
  doxygen python3-breathe                       # make docs: the C++ API reference from the public headers
  python3-jsonschema                            # tests: space.json examples and the parser against search/space.schema.json
)
PACKAGES=("${DEMO_PACKAGES[@]}")
if [[ "$profile" == all ]]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi
# npm fetches the pinned Plotly.js of the report (scripts/fetch-plotly.sh;
# both profiles: the demo writes a report). Debian's npm package, unless an
# npm is already installed (e.g. with a nodejs from elsewhere, which
# Debian's npm would conflict with).
if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(npm)
fi

if [[ $list_only -eq 1 ]]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
  SUDO=()
  if [[ "$(id -u)" -ne 0 ]]; then
    SUDO=(sudo --preserve-env=DEBIAN_FRONTEND)
  fi
  echo "install-deps: installing ${missing[*]}"
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" apt-get install -y -q "${missing[@]}"
fi

# The charting library of hpsearch report (pinned, checksum checked; a
# no-op when present).
"$(dirname "${BASH_SOURCE[0]}")/fetch-plotly.sh"

#!/usr/bin/env bash
# Installs the Debian 12 packages hpsearch needs to build, test and run its
# demo. Idempotent: only missing packages are installed (apt-get update runs
# only then), and nothing is printed when everything is already there.
# Uses sudo when not run as root.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
  build-essential cmake ninja-build pkg-config  # toolchain
  libtorch-dev libopenblas0-pthread             # LibTorch objectives
  libzmq3-dev cppzmq-dev libcereal-dev          # coordinator <-> worker protocol
  libsqlite3-dev sqlite3                        # storage
  libcli11-dev nlohmann-json3-dev               # CLI, space.json
  libspdlog-dev libfmt-dev zlib1g-dev           # logging, data loading
  libgtest-dev libgmock-dev                     # tests
  dataset-fashion-mnist                         # data of the Fashion-MNIST objectives
  python3-optuna                                # bench/ comparisons
  clang clang-format clang-tidy                 # format check, analysis, fuzzing
  libclang-rt-14-dev                            # libFuzzer and sanitizer runtimes of clang 14
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  SUDO=(sudo --preserve-env=DEBIAN_FRONTEND)
fi

echo "install-deps: installing ${missing[*]}"
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q "${missing[@]}"

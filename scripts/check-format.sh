#!/usr/bin/env bash
# Fails (exit 1) and lists the files that differ from `clang-format` with the
# repository's .clang-format. `scripts/check-format.sh --fix` rewrites them.
# Run by `make test` (target check-format) so the README's claim stays true.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' 2>/dev/null || find . -path ./build -prune -o \( -name '*.cpp' -o -name '*.h' \) -print)
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    bad+=("$f")
  fi
done
if [[ ${#bad[@]} -ne 0 ]]; then
  echo "check-format: ${#bad[@]} file(s) differ from clang-format (fix: scripts/check-format.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"

#!/usr/bin/env bash
# Fetches the charting library of `hpsearch report` / `hpsearch dashboard`:
# Plotly.js (the plotly.js-dist-min npm package, the build Optuna's own
# visualization uses), at a pinned version, through `npm pack`; checks the
# tarball's sha256 and unpacks plotly.min.js to third_party/plotly/ (ignored
# by git, never committed), where the build finds it and installs it beside
# the hpsearch executable. Idempotent: does nothing when the pinned file is
# already there. Called by scripts/install-deps.sh.
set -euo pipefail

PLOTLY_VERSION="2.35.2"
PLOTLY_SHA256="519b4874ce25867da4e8f59e6356a8ac0d36990f0901a54c2189d75e793dcb8b"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/third_party/plotly"
stamp="$dest/VERSION"

if [[ -f "$dest/plotly.min.js" && -f "$stamp" && "$(cat "$stamp")" == "$PLOTLY_VERSION $PLOTLY_SHA256" ]]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-plotly: npm is missing (Debian package npm; scripts/install-deps.sh installs it)" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-plotly: npm pack plotly.js-dist-min@$PLOTLY_VERSION"
(cd "$tmp" && npm pack --silent "plotly.js-dist-min@$PLOTLY_VERSION" >/dev/null)
tarball="$tmp/plotly.js-dist-min-$PLOTLY_VERSION.tgz"
actual="$(sha256sum "$tarball" | cut -d' ' -f1)"
if [[ "$actual" != "$PLOTLY_SHA256" ]]; then
  echo "fetch-plotly: checksum mismatch for plotly.js-dist-min-$PLOTLY_VERSION.tgz:" >&2
  echo "  expected $PLOTLY_SHA256" >&2
  echo "  got      $actual" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$tmp" package/plotly.min.js package/LICENSE
mkdir -p "$dest"
mv "$tmp/package/plotly.min.js" "$dest/plotly.min.js"
mv "$tmp/package/LICENSE" "$dest/LICENSE"
echo "$PLOTLY_VERSION $PLOTLY_SHA256" >"$stamp"
echo "fetch-plotly: $dest/plotly.min.js (Plotly.js $PLOTLY_VERSION, sha256 checked)"

#!/usr/bin/env bash
# Re-fetch the vendored uPlot (the dashboard's charts) from the npm registry: the
# tarball of the pinned version is checked against the registry's published sha512
# before its dist files and LICENSE replace the ones here. To upgrade, change VERSION
# and INTEGRITY (from `npm view uplot@VERSION dist.integrity`) and update README.md.
set -euo pipefail
VERSION=1.6.32
INTEGRITY='sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw=='
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack "uplot@$VERSION" --silent >/dev/null
tarball="uplot-$VERSION.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [ "$got" != "$INTEGRITY" ]; then
  echo "uplot-$VERSION.tgz: integrity $got, expected $INTEGRITY" >&2
  exit 1
fi
tar xzf "$tarball"
cp package/dist/uPlot.iife.min.js package/dist/uPlot.min.css package/LICENSE "$here/"
echo "uPlot $VERSION vendored into $here"

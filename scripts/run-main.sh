#!/usr/bin/env bash
# The main job on the embedded default (SQLite): set up, show the toolchains, build the gfx1250 cache.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/rocke-aot toolchains
if .venv/bin/rocke-aot build --help >/dev/null 2>&1; then
  .venv/bin/rocke-aot build --arch gfx1250 "$@"
fi

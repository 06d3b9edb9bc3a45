#!/usr/bin/env bash
# Make an installed venv (and the project tree beside it) as small as a serving image wants,
# without changing what it runs. The serving image's build stage calls it after
# `setup.sh --serve-image` (Dockerfile, stage serve-build); nothing else needs it.
#
#   bash scripts/slim-venv.sh [.venv]
#     1. pip, setuptools, wheel (and setuptools' distutils shim) uninstalled: nothing
#        installs into a running image; the editable install is a static .pth, no hook
#     2. debug symbols stripped from every shared object (`strip --strip-unneeded`: the
#        wheels of zstandard, uvloop, sqlalchemy, cryptography ship them): about half the bytes
#     3. byte code compiled once, deliberately: every __pycache__ dropped, then compileall
#        over site-packages and the project (level 0 only, unchecked-hash: an image's files
#        never change, so no source is stat'ed at import). Without it each start compiles
#        everything again in memory (PYTHONDONTWRITEBYTECODE, a read-only tree): ~3x slower
#   output: one "[slim] ..." line per step with the venv's size before and after
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
PY=$VENV/bin/python
log() { printf '[slim] %s\n' "$*" >&2; }
size() { du -sm "$@" | awk '{s += $1} END {print s " MB"}'; }
[ -x "$PY" ] || { log "no venv at $VENV"; exit 1; }
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# the project: the rocke_aot package (every layer is a real folder inside it)
PROJECT=("$PWD/rocke_aot")
log "start: $VENV $(size "$VENV"), project $(size "${PROJECT[@]}")"

"$PY" -m pip uninstall -q -y --disable-pip-version-check setuptools wheel pip 2>/dev/null || true
rm -f "$SITE/distutils-precedence.pth"; rm -rf "$SITE/_distutils_hack"
"$PY" -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ("pip", "setuptools", "wheel")))' \
  || { log "pip, setuptools or wheel is still importable"; exit 1; }
log "installers: pip, setuptools, wheel removed ($(size "$VENV"))"

command -v strip >/dev/null || { log "strip: not installed (apt-get install binutils)"; exit 1; }
find "$VENV" -type f \( -name '*.so' -o -name '*.so.*' \) -exec strip --strip-unneeded {} +
log "strip: debug symbols removed from $(find "$VENV" -type f \( -name '*.so' -o -name '*.so.*' \) | wc -l) shared objects ($(size "$VENV"))"

find "$VENV" . -name __pycache__ -type d -prune -exec rm -rf {} +
"$PY" -m compileall -q -j 0 -o 0 --invalidation-mode unchecked-hash "$SITE" "${PROJECT[@]}" >/dev/null
log "byte code: compiled once, unchecked-hash ($(size "$VENV"), project $(size "${PROJECT[@]}"))"

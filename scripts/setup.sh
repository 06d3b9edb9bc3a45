#!/usr/bin/env bash
# Idempotent setup on a fresh Debian machine: system packages, the project venv,
# and the lane toolchains. Safe to run again: each step checks before it acts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# 1. Debian packages: ld.lld 22 (links HSACOs), llvm-22 (readelf/objdump for inspection),
#    Debian's COMGR (a real COMGR for the COMGR code path), PostgreSQL for the store tests.
APT_PKGS=(lld-22 llvm-22 libamd-comgr2 postgresql)
missing=()
for p in "${APT_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}" >/dev/null
fi

# 2. ptxas for the sm_90 path: the CUDA one on PATH, else NVIDIA's pip wheel in the venv.
# 3. The project venv (re-installed only when pyproject.toml changed).
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then log "creating .venv"; "$PY" -m venv .venv; fi
STAMP=.venv/.rocke-aot-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  log "pip install -e .[test]"
  .venv/bin/python -m pip install -q --disable-pip-version-check -U pip >/dev/null
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
  echo "$want" > "$STAMP"
fi
if ! command -v ptxas >/dev/null 2>&1 && [ ! -x .venv/bin/ptxas ]; then
  log "no ptxas on PATH: installing NVIDIA's nvcc wheel into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check "nvidia-cuda-nvcc-cu12"
  found=$(find .venv -name ptxas -type f | head -1)
  [ -n "$found" ] && ln -sf "$ROOT/$found" .venv/bin/ptxas
fi

# 4. Lane toolchains (idempotent: reuse environments that already detect as their lane).
for lane in ${ROCKE_AOT_SETUP_LANES:-llvm20 llvm24}; do  # llvm24: triton 3.9 wheel (LLVM 24 codegen)
  log "toolchain install $lane"
  .venv/bin/rocke-aot toolchain install "$lane"
done
log "ready"

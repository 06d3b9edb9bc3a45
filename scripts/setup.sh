#!/usr/bin/env bash
# Idempotent setup on a fresh Debian machine: system packages, the project venv, ptxas (with
# cuobjdump) and the lane toolchains. Every step checks before it acts and prints what it did and how long
# it took; a run that finds everything in place says "nothing to do: ..." and changes nothing.
#
# One script for the README's commands, CI and the Dockerfile (so they cannot drift):
#   bash scripts/setup.sh                 everything: apt (incl. PostgreSQL and nginx for the tests),
#                                         .venv with the [test] extra, ptxas, lanes
#   bash scripts/setup.sh --serve-image   what `rocke-aot serve` alone needs: python3, the venv
#                                         with the [serve] extra; no compiler, no ptxas, no lanes
#   bash scripts/setup.sh --image         what the builder image needs: no PostgreSQL server,
#                                         no test extra, no inspection tools (llvm-22)
#   bash scripts/setup.sh --only apt      one step (apt | venv | ptxas | lanes); repeatable
#   bash scripts/setup.sh --check         change nothing: exit 1 naming what a run would do
#   ROCKE_AOT_SETUP_LANES="llvm20 llvm23 llvm24 triton-3.6.0-py3.12" the lane toolchains to install
#                                         (default); a triton-X-pyY.Z lane needs pythonY.Z: where
#                                         there is none it is refused by name before anything runs
#   ROCKE_AOT_HOME=DIR                    where lane toolchains are registered
#                                         (default ~/.cache/rocke-aot)
#   PYTHON=python3.12                     the interpreter the venv is made from
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PROFILE=dev
CHECK=0
ONLY=()
while (($#)); do
  case "$1" in
    --image) PROFILE=image ;;
    --serve-image) PROFILE=serve ;;
    --only) shift; ONLY+=("${1:?--only needs a step: apt, venv, ptxas or lanes}") ;;
    --check) CHECK=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { printf '[setup] %s\n' "$*" >&2; }
now() { date +%s.%N; }
T0=$(now)
DONE=()     # steps that changed something
CHECKED=()  # steps that found everything in place
step_start() { STEP=$1; STEP_T=$(now); }
step_end() {  # step_end did|ok WHAT
  local secs; secs=$(awk -v a="$STEP_T" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$1" = did ]; then DONE+=("$STEP"); log "$STEP: $2 (${secs} s)"; else CHECKED+=("$2"); log "$STEP: nothing to do, $2 (${secs} s)"; fi
}
# would WHAT: under --check, record what a run would do and tell the step to skip its action.
WOULD=()
would() { ((CHECK)) || return 1; WOULD+=("$STEP: $*"); log "$STEP: would $*"; return 0; }
want() { ((${#ONLY[@]} == 0)) && return 0; local s; for s in "${ONLY[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

# 0. Preflight: every requested Triton lane's interpreter exists (or the lane is installed
#    already), else the lane is refused by name now, not after the minutes the venv takes.
#    (Debian bookworm has python3.11 only: the builder image leaves triton-3.6.0-py3.12 out.)
LANES=${ROCKE_AOT_SETUP_LANES-llvm20 llvm23 llvm24 triton-3.6.0-py3.12}
if want lanes && [ "$PROFILE" != serve ]; then
  for lane in $LANES; do
    if [[ $lane =~ ^triton-([0-9.]+)-py([0-9]+\.[0-9]+)$ ]] && ! command -v "python${BASH_REMATCH[2]}" >/dev/null 2>&1 \
        && [ ! -x "${ROCKE_AOT_HOME:-$HOME/.cache/rocke-aot}/lanes/$lane/bin/python" ]; then
      log "lanes: refusing lane $lane: it needs python${BASH_REMATCH[2]}, which this machine lacks" \
          "($(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || echo "this system") has $(python3 --version 2>&1));" \
          "install python${BASH_REMATCH[2]} or leave the lane out (ROCKE_AOT_SETUP_LANES, or docker build --build-arg LANES=...)"
      exit 2
    fi
  done
fi

# 1. Debian packages. Runtime: python3 (+venv), ld.lld 22 (links HSACOs), Debian's COMGR (the
#    COMGR code path). dev adds llvm-22 (readelf/objdump: the tests' reference reader) and
#    PostgreSQL's server binaries: the test suite initdb's its own throwaway cluster with them
#    (tests/_pg.py), as the unprivileged `postgres` account the package creates; and nginx:
#    the mirror tests serve an exported tree with it, unprivileged on a loopback port; and
#    faketime: tuf-conformance (bench/tuf_conformance.sh) moves the host client's clock with it.
APT_PKGS=(python3 python3-venv ca-certificates)
[ "$PROFILE" = serve ] || APT_PKGS+=(lld-22 libamd-comgr2)
[ "$PROFILE" = dev ] && APT_PKGS+=(llvm-22 postgresql nginx faketime)
if want apt; then
  step_start apt
  missing=()
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})) && would "install ${missing[*]}"; then :
  elif ((${#missing[@]})); then
    log "apt: installing ${missing[*]}"
    $SUDO apt-get update -q >/dev/null
    # No recommends: a server's extras (and the image's size) stay out; policy-rc.d-free
    # containers may not start the packaged cluster, which the tests never use anyway.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    step_end did "installed ${missing[*]}"
  else
    step_end ok "apt packages present (${APT_PKGS[*]})"
  fi
fi

# 2. The project venv, re-installed only when pyproject.toml (or the profile) changed. dev also
#    installs the example family plugin (examples/plugin-rowsoftmax, editable: a static .pth of its
#    folder), so the test suite runs with a plugin installed as a user would (docs/plugins.md).
PY=${PYTHON:-python3}
STAMP=.venv/.rocke-aot-installed
EXTRA="[all]"; [ "$PROFILE" = dev ] && EXTRA="[test]"  # test includes all
[ "$PROFILE" = serve ] && EXTRA="[serve]"
PLUGINS=(); [ "$PROFILE" = dev ] && PLUGINS=(examples/plugin-rowsoftmax)
if want venv; then
  step_start venv
  stamp_want="$(cat pyproject.toml "${PLUGINS[@]/%//pyproject.toml}" | sha256sum | cut -d' ' -f1) $PROFILE"
  if [ -x .venv/bin/python ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$stamp_want" ]; then
    step_end ok ".venv up to date with pyproject.toml ($PROFILE)"
  elif would "pip install -e .$EXTRA into .venv"; then :
  else
    [ -x .venv/bin/python ] || { log "venv: creating .venv with $PY"; "$PY" -m venv .venv; }
    log "venv: pip install -e .$EXTRA"
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir -U pip >/dev/null
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir -e ".$EXTRA"
    for p in "${PLUGINS[@]}"; do  # its only dependency is rocke-aot itself, just installed
      log "venv: pip install -e $p"
      .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps --no-build-isolation -e "$p"
    done
    echo "$stamp_want" > "$STAMP"
    step_end did "installed rocke-aot$EXTRA${PLUGINS:+ and ${PLUGINS[*]}} into .venv"
  fi
fi

# 3. ptxas for the sm_90 path, and cuobjdump with the nvdisasm it runs: the build reads every
#    sm_90 cubin's SASS for ptxas's schedule (aot/sass.py; without them it records "schedule:
#    unavailable" and the model uses its counts). All three are the venv's pinned NVIDIA wheels of
#    one CUDA release, linked to .venv/bin, beside the interpreter, where the product looks before
#    PATH (aot/compiler/ptx.py find_ptxas, aot/sass.py find_cuobjdump): every builder assembles and
#    disassembles with the same tools, a host with no CUDA works, and a CUDA that happens to be on
#    PATH (/usr/local/bin/ptxas) is not silently used instead. ROCKE_AOT_PTXAS names another.
CUDA_WHEELS=13.5.37
if want ptxas && [ "$PROFILE" != serve ]; then
  step_start ptxas
  did=() ok=()
  if [ -x .venv/bin/ptxas ] && .venv/bin/ptxas --version 2>/dev/null | grep -q "V$CUDA_WHEELS"; then
    ok+=("ptxas $CUDA_WHEELS at $ROOT/.venv/bin/ptxas")
  elif would "install NVIDIA's nvcc wheel $CUDA_WHEELS for ptxas"; then :
  else
    log "ptxas: installing NVIDIA's nvcc wheel $CUDA_WHEELS into .venv"
    # --no-deps: the wheel's dependencies (nvidia-nvvm ~175 MB, the CUDA runtime, crt) serve nvcc,
    # which nothing here runs; ptxas is a program of its own.
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps "nvidia-cuda-nvcc==$CUDA_WHEELS"
    found=$(find .venv -path "*nvidia*" -name ptxas -type f | head -1)
    [ -n "$found" ] || { log "ptxas: the wheel has no ptxas binary"; exit 1; }
    if [ "$PROFILE" = image ]; then  # the image keeps ptxas only of that wheel's programs (~100 MB less)
      for unused in nvcc nvlink cudafe++ fatbinary bin2c __nvcc_device_query nvcc.profile crt; do
        rm -rf "$(dirname "$found")/$unused"
      done
    fi
    ln -sf "$ROOT/$found" .venv/bin/ptxas
    .venv/bin/ptxas --version | grep -q "V$CUDA_WHEELS" || { log "ptxas: .venv/bin/ptxas is not $CUDA_WHEELS"; exit 1; }
    did+=("linked .venv/bin/ptxas -> $found ($CUDA_WHEELS)")
  fi
  if [ -x .venv/bin/cuobjdump ] && [ -x .venv/bin/nvdisasm ] \
      && .venv/bin/cuobjdump --version 2>/dev/null | grep -q "V$CUDA_WHEELS"; then
    ok+=("cuobjdump $CUDA_WHEELS at $ROOT/.venv/bin/cuobjdump")
  elif would "install NVIDIA's cuobjdump and nvdisasm wheels $CUDA_WHEELS"; then :
  else
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir \
      "nvidia-cuda-cuobjdump==$CUDA_WHEELS" "nvidia-cuda-nvdisasm==$CUDA_WHEELS"
    for tool in cuobjdump nvdisasm; do
      found=$(find .venv -path "*nvidia*" -name "$tool" -type f | head -1)
      [ -n "$found" ] || { log "ptxas: the $tool wheel has no $tool binary"; exit 1; }
      ln -sf "$ROOT/$found" ".venv/bin/$tool"
    done
    .venv/bin/cuobjdump --version | grep -q "V$CUDA_WHEELS" || { log "ptxas: .venv/bin/cuobjdump is not $CUDA_WHEELS"; exit 1; }
    did+=("linked .venv/bin/cuobjdump and nvdisasm ($CUDA_WHEELS)")
  fi
  join() { local IFS=';'; echo "$*" | sed 's/;/; /g'; }
  if ((${#did[@]})); then step_end did "$(join "${did[@]}" "${ok[@]}")"; else step_end ok "$(join "${ok[@]}")"; fi
fi

# 4. Lane toolchains: a lane counts as present when $ROCKE_AOT_HOME/toolchains.json registers
#    it and its environment is still on disk (a file read, not a probe of every compiler);
#    llvm23 (AMD's LLVM 23, in the venv through hip-python[compiler]) when the two ROCm
#    sysdeps shims it needs are built ($ROCKE_AOT_HOME/sysdeps: aot/toolchains/rocm_sysdeps.py,
#    made with the project's own llvmlite and ld.lld, so no compiler package is needed);
#    the others get `rocke-aot toolchain install LANE` (idempotent itself, and it verifies).
if want lanes && [ "$PROFILE" != serve ]; then
  step_start lanes
  # llvm23: AMD LLVM 23; llvm24: triton 3.9 (LLVM 24 codegen); triton-3.6.0-py3.12: the Triton of the
  # NVIDIA H200 qualification host (Python 3.12), a Triton toolchain of the llvm22 lane
  have=$(.venv/bin/python - <<'PY' 2>/dev/null || true
import json, os
from rocke_aot import paths
try:
    entries = json.loads((paths.home() / "toolchains.json").read_text()).get("toolchains", [])
except (OSError, ValueError):
    entries = []
have = [e["label"] for e in entries
        if e.get("label") and any(os.path.exists(e[k]) for k in ("python", "venv") if e.get(k))]
from rocke_aot.aot.toolchains import rocm_sysdeps
if not rocm_sysdeps.missing():
    have.append("llvm23")
print(" ".join(have))
PY
)
  todo=()
  for lane in $LANES; do [[ " $have " == *" $lane "* ]] || todo+=("$lane"); done
  if ((${#todo[@]})) && would "install lane toolchains ${todo[*]}"; then :
  elif ((${#todo[@]})); then
    for lane in "${todo[@]}"; do
      if [[ $lane =~ ^triton-([0-9.]+)-py([0-9]+\.[0-9]+)$ ]]; then  # label of `install triton==X --python pyY.Z`
        log "lanes: rocke-aot toolchain install triton==${BASH_REMATCH[1]} --python python${BASH_REMATCH[2]}"
        .venv/bin/rocke-aot toolchain install "triton==${BASH_REMATCH[1]}" --python "python${BASH_REMATCH[2]}"
        continue
      fi
      log "lanes: rocke-aot toolchain install $lane"
      .venv/bin/rocke-aot toolchain install "$lane"
    done
    step_end did "installed lane toolchains ${todo[*]}"
  else
    step_end ok "lane toolchains present (${LANES:-none requested})"
  fi
fi

total=$(awk -v a="$T0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
if ((${#WOULD[@]})); then
  log "not set up (--check changed nothing): $(printf '%s; ' "${WOULD[@]}")"
  exit 1
elif ((${#DONE[@]})); then
  log "ready: changed ${DONE[*]} in ${total} s"
else
  log "nothing to do: $(printf '%s; ' "${CHECKED[@]}")checked in ${total} s"
fi

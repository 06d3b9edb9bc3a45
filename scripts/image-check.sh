#!/usr/bin/env bash
# The builder image's self-check, run by the Dockerfile as the image user (uid 10001) through
# runuser: every default command of the image, and nothing written outside the user's home
# and the cache volume (both /var/lib/rocke-aot). The image's toolchain home
# (/opt/rocke-aot/home) is root's and read-only here, as in a running container.
#
#   rocke-aot toolchains                the image's CMD: every lane listed, none refused
#   rocke-aot build ... --cache V/...    one small gemm set on every lane with a toolchain
#   rocke-aot cache ls / verify          the store it wrote, read back and checked
#   find / -user <me> -newer <start>     files this user wrote: only under /var/lib/rocke-aot
#
#   runuser -u rocke -- bash scripts/image-check.sh [DIR]   output: "[image-check] ..." lines; exit 1 on a failure
set -euo pipefail
V=${1:-/var/lib/rocke-aot}  # the home and cache volume (an argument only to try it elsewhere)
log() { printf '[image-check] %s\n' "$*"; }
start=$(mktemp -p "$V" .image-check.XXXXXX)
work=$V/image-check
trap 'rm -rf "$work" "$start"' EXIT
CACHE=sqlite:///$work/cache.sqlite

rocke-aot toolchains >/dev/null
rocke-aot toolchains --json | python3 -c '
import json, os, sys
rows = json.load(sys.stdin)
lanes = sorted({r["lane"] for r in rows if r.get("lane") and not r.get("refusal")})
want = {"llvm22", *(w for w in os.environ.get("ROCKE_AOT_SETUP_LANES", "").split() if w.startswith("llvm"))}
refused = sorted("%s LLVM %s" % (r["kind"], r["llvm_major"]) for r in rows if r.get("refusal"))
print("[image-check] toolchains: lanes", " ".join(lanes), "; refused on purpose:", ", ".join(refused) or "none")
missing = sorted(want - set(lanes))
if missing:
    print("[image-check] toolchains: no usable toolchain for", " ".join(missing))
sys.exit(1 if missing else 0)'
mkdir -p "$work"
rocke-aot build --arch gfx942 --family gemm --where path=fma --where block_m=64 --where block_n=64 \
  --where block_k=32 --where waves=4 --cache "$CACHE" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("[image-check] build: lanes", " ".join(d["lanes"]), "built", d["built"], "failed", len(d["failed"]))
sys.exit(1 if d["failed"] or not d["built"] else 0)'
n=$(rocke-aot cache ls --cache "$CACHE" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
rocke-aot cache verify --cache "$CACHE" >/dev/null
log "cache: $n kernels listed, verified"
outside=$( (find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path "$V" \) -prune -o \
  -user "$(id -u)" -newer "$start" -print 2>/dev/null || true) | head -20)
if [ -n "$outside" ]; then
  log "written outside $V by uid $(id -u): $outside"
  exit 1
fi
log "ok: uid $(id -u) wrote nothing outside $V"

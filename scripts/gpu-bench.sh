#!/usr/bin/env bash
# Qualification of `rocke-aot bench --run-from-cache` on an NVIDIA GPU (sm_90), as docs/bench.md
# reports it: build the sm_90 cache, serve it on loopback, run the problem sets from the server
# once and from the local cache once, a chunked problem over 2 GiB, and the vendor library.
# Needs python3 with llvmlite 0.50, numpy, torch, cuda-bindings and ptxas; other packages as
# wheels in .whl/ (see scripts/gpu-tests.sh). Results go to ${OUT:-/tmp/rocke-out}.
set -eo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rocke-out}; mkdir -p "$OUT"
source scripts/gpu-site.sh
export ROCKE_AOT_HOME=/tmp/rocke-home CACHE=/tmp/rocke-home/cache.sqlite
RA() { "$PY" -c 'import sys; from rocke_aot.cli.main import main; sys.argv[0]="rocke-aot"; main()' "$@"; }
cd /tmp   # so the repository folders cannot shadow the installed package
REPO=$OLDPWD
t0=$(date +%s)
RA toolchains 2>&1 | tee "$OUT/toolchains.txt"
RA build --arch sm_90 --lane llvm22 --cache "$CACHE" -j 16 --json > "$OUT/build.json" 2> "$OUT/build.log" || true
"$PY" -c "import json; d=json.load(open('$OUT/build.json')); print({k: d[k] for k in d if isinstance(d[k], (int, float, str))})"
echo "build: $(( $(date +%s) - t0 )) s"
# the cache signed (a generation per arch/lane/family) and served on loopback with its metadata
K=/tmp/rocke-home/keys; rm -rf "$K"; mkdir -p "$K"
RA trust keygen "$K/root.key" > /dev/null && RA trust keygen "$K/release.key" > /dev/null
RA trust root --key "$K/root.key" --release "$K/release.key.pub" -o "$K/root.json" > /dev/null
RA trust sign --cache "$CACHE" --root "$K/root.json" --key "$K/release.key" -o "$K/signed" --json > "$OUT/signed.json"
RA serve --cache "$CACHE" --trust-dir "$K/signed" --host 127.0.0.1 --port 8765 > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for i in $(seq 50); do "$PY" -c "import httpx; httpx.get('http://127.0.0.1:8765/healthz').raise_for_status()" 2>/dev/null && break; sleep 0.2; done
P=$REPO/bench/problems
QREPS=${QUALITY_REPS:-5}   # repeats per candidate in the all-candidates passes (more: less winner's curse)
# QUALITY_VERIFY="fam ..." also verifies every candidate of those families in pass 1
# (after a lowering change: every kernel of the family checked, not only the top 3 of pass 2)
# QUALITY_FAMILIES="fam ..." limits pass 1 to those families (default: all three)
FAMS=${QUALITY_FAMILIES:-gemm conv_direct_fwd conv_dgrad_patch}
check() { case " ${QUALITY_VERIFY:-} " in *" $1 "*) echo --verify ;; *) echo --no-verify ;; esac; }
# 1. selection quality: every candidate, from the local cache, timed (numerics: pass 2), on the
#    problem sets (quality) and on hold-out problems the time model's constants were never fitted
#    on (holdout); QUALITY_SETS="holdout" runs one of them (a 10-minute device call holds one)
for set in ${QUALITY_SETS:-quality holdout}; do
  case $set in quality) pre= ;; holdout) pre=holdout- ;; *) echo "unknown set $set"; exit 2 ;; esac
  for fam in $FAMS; do
    RA bench --run-from-cache --arch sm_90 --family $fam --problems $P/$pre$fam.json --cache "$CACHE" \
       --candidates all $(check $fam) --warmup 1 --reps $QREPS --out "$OUT/$set-$fam.json" --json > /dev/null \
       2> "$OUT/$set-$fam.log" || echo "$set $fam: rc=$?"
    echo "$set $fam: $(( $(date +%s) - t0 )) s"
  done
done
# 1c. residency: parsed cubin resources and groups per SM against the driver's occupancy API
"$PY" "$REPO/bench/gpu_occupancy.py" --cache "$CACHE" --out "$OUT/occupancy.json" > "$OUT/occupancy.txt" 2>&1 \
  || echo "occupancy: rc=$?"
head -c 3000 "$OUT/occupancy.txt"
# 2. numerics + speed of the top candidates, fetched from the server through the verifying
#    client (the root key pinned: every kernel under the signed manifest; a fresh local store)
# (QUALITY_ONLY=1 skips passes 2 and 3: a re-measurement of selection quality alone)
for fam in $([ -n "$QUALITY_ONLY" ] || echo gemm conv_direct_fwd conv_dgrad_patch); do
  rm -rf /tmp/rocke-client-$fam
  RA bench --run-from-cache --arch sm_90 --family $fam --problems $P/$fam.json --server http://127.0.0.1:8765 \
     --root-key "$K/root.key.pub" --local /tmp/rocke-client-$fam --candidates top:3 --verify --reps 10 \
     --out "$OUT/server-$fam.json" \
     > "$OUT/server-$fam.txt" 2>&1 || echo "server $fam: rc=$?"
  echo "server $fam: $(( $(date +%s) - t0 )) s"
done
# 3. one problem over 2 GiB (A: 1,050,000 x 1024 f16 = 2.15e9 bytes), chunked and verified
[ -n "$QUALITY_ONLY" ] || RA bench --run-from-cache --arch sm_90 --family gemm --problem '{"m": 1050000, "n": 128, "k": 1024}' \
   --cache "$CACHE" --candidates top:1 --verify --reps 3 --out "$OUT/chunked.json" > "$OUT/chunked.txt" 2>&1 \
   || echo "chunked: rc=$?"
echo "total: $(( $(date +%s) - t0 )) s"
"$PY" - "$OUT" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
for f in sorted(glob.glob(os.path.join(out, "*.json"))):
    if os.path.basename(f) in ("build.json", "occupancy.json"):
        continue
    d = json.load(open(f))
    print(os.path.basename(f), json.dumps(d.get("summary")))
PY
# one archive of every raw output (the device tool brings back few files)
(cd "$OUT" && tar czf /tmp/rocke-results.tar.gz ./*.json ./*.log ./*.txt && rm -f ./*.json ./*.log ./*.txt \
   && mv /tmp/rocke-results.tar.gz results.tar.gz)

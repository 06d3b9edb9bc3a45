#!/usr/bin/env bash
# The device calls of runs 24-25 (docs/gpu.md), on a machine with an sm_90 GPU, `.whl/` carried.
#   bash bench/wgmma_device.sh sweep   layout probe (bench/wgmma_layout_probe.py), then the mma.sync and
#                                      wgmma sweep behind a hold (bench/gemm_async_h200.py --wgmma --held)
#                                      on the 8 large and 8 aligned hold-out problems, then the gemm
#                                      sets through scripts/gpu-bench.sh (SETS_S seconds at most)
#   bash bench/wgmma_device.sh sets    the gemm table built (--family gemm), both gemm sets through
#                                      `rocke-aot bench --run-from-cache --candidates all`, and the
#                                      table's wgmma specs in the GPU tests
# Results go to $OUT (the device tool's folder; default /tmp/rocke-out).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-/tmp/rocke-out}; mkdir -p "$OUT"
source scripts/gpu-site.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
case "${1:-}" in
sweep)
  cd /tmp
  timeout 100 "$PY" "$REPO/bench/wgmma_layout_probe.py" --json "$OUT/probe.json" > "$OUT/probe.txt" 2>&1
  echo "probe rc=$?"; tail -30 "$OUT/probe.txt"
  L=3072x3072x3072,4096x4096x4096,2048x4096x4096,4096x4096x1024,256x11008x4096,2048x14336x4096,128x4096x14336
  L=$L,8192x8192x1024,512x4096x1024,4096x512x2048,1536x6144x1024,32x8192x2048,6000x6000x256,1280x5120x1280
  L=$L,8192x1024x128,2560x2560x512
  timeout "${SWEEP_S:-200}" "$PY" "$REPO/bench/gemm_async_h200.py" --wgmma --held --json "$OUT/sweep.json" \
    --problems "$L" > "$OUT/sweep.txt" 2>&1
  echo "sweep rc=$?"; grep -E "ragged|compiled|wrong|^[0-9]+x.*(wgmma|new|torch)|^  " "$OUT/sweep.txt" | tail -80
  cd "$REPO"
  OUT=$OUT/sets QUALITY_SETS="quality holdout" QUALITY_REPS=3 QUALITY_ONLY=1 QUALITY_FAMILIES=gemm \
    QUALITY_VERIFY=gemm timeout "${SETS_S:-270}" bash scripts/gpu-bench.sh > "$OUT/sets.txt" 2>&1
  echo "sets rc=$?"; tail -25 "$OUT/sets.txt" ;;
sets)
  export ROCKE_AOT_HOME=/tmp/rocke-home CACHE=/tmp/rocke-home/cache.sqlite
  mkdir -p "$ROCKE_AOT_HOME"
  RA=("$PY" -c 'import sys; from rocke_aot.cli.main import main; sys.argv[0]="rocke-aot"; main()')
  cd /tmp; t0=$(date +%s)
  timeout 90 "${RA[@]}" build --arch sm_90 --lane llvm22 --family gemm --cache "$CACHE" -j 16 --json \
    > "$OUT/build.json" 2> "$OUT/build.log"
  echo "build rc=$? $(( $(date +%s) - t0 )) s"
  for set in holdout- ""; do
    timeout "${SET_S:-100}" "${RA[@]}" bench --run-from-cache --arch sm_90 --family gemm \
      --problems "$REPO/bench/problems/${set}gemm.json" --cache "$CACHE" --candidates all --no-verify --warmup 1 \
      --reps 3 --out "$OUT/${set}gemm.json" --json > /dev/null 2> "$OUT/${set}gemm.log"
    echo "set ${set}gemm rc=$? $(( $(date +%s) - t0 )) s"
    "$PY" -c "import json; print(json.dumps(json.load(open('$OUT/${set}gemm.json'))['summary']))"
  done
  rm -rf /tmp/rocke-wg-tests && cp -r "$REPO/tests" /tmp/rocke-wg-tests && cp "$REPO/pyproject.toml" /tmp/rocke-wg-tests/
  cd /tmp/rocke-wg-tests
  timeout 120 "$PY" -m pytest -p no:cacheprovider -m gpu -q -x -k "_wg" ./test_gemm_mma_gpu.py > "$OUT/gpu-tests.log" 2>&1
  echo "gpu tests rc=$?"; tail -3 "$OUT/gpu-tests.log" ;;
*) echo "usage: bash bench/wgmma_device.sh sweep|sets"; exit 2 ;;
esac

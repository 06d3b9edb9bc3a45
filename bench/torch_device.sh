#!/usr/bin/env bash
# Issue 40 on one NVIDIA GPU host (H100/H200, sm_90), in one command, under 8 minutes:
#   1. the problems a Llama-style decoder (transformers, random weights, prefill + decode) and a
#      torchvision ResNet-50 (random weights) call (bench/torch_models.py problems)
#   2. the sm_90 cache for them, BUILT HERE (rocke-aot build --problems, llvmlite 0.50)
#   3. signed and served on 127.0.0.1 (rocke-aot serve --trust-dir): the hosts' source
#   4. time to first inference on a fresh host per model (a new process, an empty local store,
#      the kernels fetched and verified under the pinned root key) beside torch.compile's cold
#      start of the same model (a new process, empty inductor and Triton caches)
#   5. bench/torch_models.py run: outputs vs eager vs float32, layers served vs fallen back,
#      compiles on the host (0), steady-state forward time and per layer kind, per-call overhead
# Needs python3 with torch, transformers, torchvision, llvmlite 0.50, numpy, cuda-bindings and ptxas;
# other packages as wheels in .whl/ (`bash scripts/gpu-wheels.sh` fills it; scripts/gpu-site.sh installs it). Raw output under ${OUT:-/tmp/rocke-out}.
# Usage (from the repository root):  OUT=/tmp/out bash bench/torch_device.sh
set -eo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rocke-out}; mkdir -p "$OUT"
source scripts/gpu-site.sh
export ROCKE_AOT_HOME=/tmp/rocke-home
CACHE=/tmp/rocke-home/cache.sqlite
rm -rf /tmp/rocke-home /tmp/rocke-client-*; mkdir -p /tmp/rocke-home
RA() { "$PY" -c 'import sys; from rocke_aot.cli.main import main; sys.argv[0]="rocke-aot"; main()' "$@"; }
REPO=$PWD
cd /tmp   # the repository folders must not shadow the installed package
BM="$REPO/bench/torch_models.py"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/timeline.txt"; }
"$PY" -c "import torch, transformers, torchvision; print('torch', torch.__version__, 'transformers', transformers.__version__, 'torchvision', torchvision.__version__, torch.cuda.get_device_name(0))" | tee "$OUT/versions.txt"
# 1. the models' problems (the attention family's too when it is registered)
ATT=$("$PY" -c "from rocke_aot.variants.families import FAMILIES; print('--attention' if 'attention' in FAMILIES else '')")
"$PY" "$BM" problems --out "$OUT/problems.json" $ATT 2>&1 | tail -3 | tee "$OUT/problems.txt"
stamp "problems"
# 2. the cache, built here
RA build --arch sm_90 --lane llvm22 --problems "$OUT/problems.json" --min-efficiency ${MIN_EFF:-0.8} --cache "$CACHE" -j "$(nproc)" --json \
   > "$OUT/build.json" 2> "$OUT/build.log" || echo "build: rc=$? (failures recorded; served shapes still run)"
"$PY" -c "import json; d=json.load(open('$OUT/build.json')); print({k: d[k] for k in d if isinstance(d[k], (int, float, str))})" \
   | tee "$OUT/build-summary.txt" || true
stamp "build"
# 3. signed, served on loopback
K=/tmp/rocke-home/keys; mkdir -p "$K"
RA trust keygen "$K/root.key" > /dev/null && RA trust keygen "$K/release.key" > /dev/null
RA trust root --key "$K/root.key" --release "$K/release.key.pub" -o "$K/root.json" > /dev/null
RA trust sign --cache "$CACHE" --root "$K/root.json" --key "$K/release.key" -o "$K/signed" --json > "$OUT/signed.json"
RA serve --cache "$CACHE" --trust-dir "$K/signed" --host 127.0.0.1 --port 8765 --workers 2 > "$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for i in $(seq 100); do "$PY" -c "import httpx; httpx.get('http://127.0.0.1:8765/healthz').raise_for_status()" 2>/dev/null && break; sleep 0.2; done
SRV=(--server http://127.0.0.1:8765 --root-key "$K/root.key.pub")
stamp "served"
# 4. time to first inference: fresh process + empty local store, beside torch.compile's cold start
for m in llama resnet50; do
  timeout 90 "$PY" "$BM" first "${SRV[@]}" --local /tmp/rocke-client-first-$m --model $m \
     > "$OUT/first-$m.json" 2> "$OUT/first-$m.log" || echo "first $m: rc=$?"
  stamp "first $m: $(cat "$OUT/first-$m.json" | head -c 300)"
  rm -rf /tmp/inductor-$m /tmp/triton-$m
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-$m TRITON_CACHE_DIR=/tmp/triton-$m timeout ${COMPILE_TIMEOUT:-120} \
     "$PY" "$BM" compile-cold --model $m > "$OUT/compile-$m.json" 2> "$OUT/compile-$m.log" \
     || echo "compile-cold $m: rc=$? (timeout ${COMPILE_TIMEOUT:-120} s: its cold start is longer)" | tee -a "$OUT/timeline.txt"
  stamp "compile-cold $m: $(cat "$OUT/compile-$m.json" | head -c 300)"
done
# 5. the models on prebuilt kernels: match, served/fallen back, compiles, speed, overhead
timeout 170 "$PY" "$BM" run "${SRV[@]}" --local /tmp/rocke-client-run --out "$OUT/run.json" > "$OUT/run.txt" 2>&1 \
   || echo "run: rc=$?" | tee -a "$OUT/timeline.txt"
tail -40 "$OUT/run.txt"
stamp "run"
"$PY" - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.loads(open(os.path.join(out, name)).read().strip().splitlines()[-1])
    except Exception:
        return None
rows = {}
for m in ("llama", "resnet50"):
    f, c = load(f"first-{m}.json"), load(f"compile-{m}.json")
    rows[m] = {"first_inference_s": f and f["first_inference_s"], "compile_cold_s": c and c["compile_first_inference_s"],
               "ratio": (f["first_inference_s"] / c["compile_first_inference_s"]) if f and c else None}
print("time to first inference vs torch.compile cold start:", json.dumps(rows))
json.dump(rows, open(os.path.join(out, "first-vs-compile.json"), "w"), indent=1)
PY
stamp "done"

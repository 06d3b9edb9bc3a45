#!/usr/bin/env bash
# Issue 38 on one NVIDIA GPU host (sm_90), one device call under 6 minutes (docs/attention.md "Third call"):
#   the native attention family's sm_90 specs built there (llvmlite 0.50 + ptxas, 16 workers) into the
#   triton_attention cache carried as .state/att.sqlite.zst (zstd of bash bench/attention_h200_prepare.sh's
#   .state/attention-h200/cache.sqlite), then bench --run-from-cache --verify over the native family's
#   problems 1, 4, 5, 6 and triton_attention's 5-10 (bench/problems/models/attention.json), then the
#   native specs' GPU test. Each step has its own timeout; raw output under $OUT.
# Usage (repository root, the device call carrying .whl and .state/att.sqlite.zst):
#   OUT=$OUT bash bench/attention_device_rest.sh
source scripts/gpu-site.sh >/dev/null 2>&1; export PATH=$PATH:/usr/local/cuda/bin; T0=$(date +%s); st(){ echo "[$(( $(date +%s)-T0 )) s] $*" | tee -a $OUT/timeline.txt; }
mkdir -p /tmp/att; $PY -c "import zstandard; open('/tmp/att/cache.sqlite','wb').write(zstandard.ZstdDecompressor().decompress(open('.state/att.sqlite.zst','rb').read(), max_output_size=1<<30))"
C=/tmp/att/cache.sqlite; RA="$PY -m rocke_aot.cli"
timeout 110 $RA build --arch sm_90 --lane llvm22 --family attention --cache $C -j 16 --json > $OUT/build-native.json 2> $OUT/build-native.log; st "build rc=$? $(tail -1 $OUT/build-native.log)"
$PY - <<'PY'
import json; d=json.load(open('bench/problems/models/attention.json'))
json.dump({"attention": [d["attention"][i] for i in (0, 3, 4, 5)]}, open('/tmp/att/native.json','w'))
json.dump({"triton_attention": d["triton_attention"][4:]}, open('/tmp/att/triton.json','w'))
PY
timeout 130 $RA bench --run-from-cache --arch sm_90 --family attention --lane llvm22 --problems /tmp/att/native.json --cache $C --candidates all --verify --out $OUT/bench-attention.json > $OUT/bench-attention.txt 2>&1; st "native bench rc=$?"
timeout 100 $RA bench --run-from-cache --arch sm_90 --family triton_attention --lane llvm22 --problems /tmp/att/triton.json --cache $C --candidates all --verify --out $OUT/bench-triton_attention.json > $OUT/bench-triton_attention.txt 2>&1; st "triton bench rc=$?"
timeout 120 bash scripts/gpu-tests.sh -q -k "native_spec" > $OUT/gpu-tests.txt 2>&1; st "tests rc=$?"; tail -4 $OUT/gpu-tests.txt
$PY -c "
import json
for f in ('bench-attention.json','bench-triton_attention.json'):
    try: d=json.load(open('$OUT/'+f))
    except Exception as e: print(f, e); continue
    print(f, d.get('summary'))
    for p in d['problems']:
        rs=sorted([r for r in p['results'] if r.get('median_ms')], key=lambda r:r['median_ms']); pr=p['problem']
        print(' ', pr['batch'],pr['seqlen_q'],pr['seqlen_k'],pr['heads_q'],pr['heads_kv'],pr['head_dim'],pr['dtype'],pr['kv_layout'], 'best', rs[0]['median_ms'] if rs else None, rs[0].get('tflops') if rs else None, p.get('vendor_ms'), p['best_over_vendor'], sum(1 for r in p['results'] if r.get('verified')), len(p['results']))
"
cd $OUT && tar czf all.tgz *.json *.txt *.log 2>/dev/null; ls

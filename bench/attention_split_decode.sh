#!/usr/bin/env bash
# Issue 38, the native attention's split-KV decode (docs/attention.md "Split-KV decode") on one NVIDIA GPU host
# (sm_90), one device call under 10 minutes (about 4.5: 156 s before the packed specs): the native attention family's sm_90 specs (unsplit and split-KV)
# built there (llvmlite + ptxas, 16 workers) into a fresh cache, bench --run-from-cache --candidates all
# --verify over bench/problems/attention_split_decode.json (the model file's two decode batches, 64 x 1 over
# 2048, and small-batch long-KV decodes where the unsplit kernel's batch x heads work-groups leave most SMs
# idle) beside torch SDPA (the paged ones have no vendor time), then the split-KV specs' GPU test (unpacked
# and GQA-packed, docs/attention.md "GQA-packed decode"; the table's columns best / unsplit / split / packed). Raw output
# under $OUT. Usage (repository root, the device call carrying .whl):
#   OUT=$OUT bash bench/attention_split_decode.sh
source scripts/gpu-site.sh >/dev/null 2>&1; export PATH=$PATH:/usr/local/cuda/bin; T0=$(date +%s); st(){ echo "[$(( $(date +%s)-T0 )) s] $*" | tee -a $OUT/timeline.txt; }
mkdir -p /tmp/attsplit; C=/tmp/attsplit/cache.sqlite; RA="$PY -m rocke_aot.cli"
timeout 150 $RA build --arch sm_90 --lane llvm22 --family attention --cache $C -j 16 --json > $OUT/build-native.json 2> $OUT/build-native.log; st "build rc=$? $(tail -1 $OUT/build-native.log)"
timeout 200 $RA bench --run-from-cache --arch sm_90 --family attention --lane llvm22 --problems bench/problems/attention_split_decode.json --cache $C --candidates all --verify --out $OUT/bench-attention-split.json > $OUT/bench-attention-split.txt 2>&1; st "bench rc=$?"
timeout 240 bash scripts/gpu-tests.sh -q -k "split_kv" > $OUT/gpu-tests.txt 2>&1; st "tests rc=$?"; tail -4 $OUT/gpu-tests.txt
$PY -c "
import json
d=json.load(open('$OUT/bench-attention-split.json'))
print(d.get('summary'))
for p in d['problems']:
    rs=sorted([r for r in p['results'] if r.get('median_ms')], key=lambda r:r['median_ms']); pr=p['problem']
    kn=lambda r: r.get('kernel', r.get('key', '')); un=[r for r in rs if '_splitkv' not in kn(r)]; sp=[r for r in rs if '_splitkv' in kn(r) and '_packgqa' not in kn(r)]; pk=[r for r in rs if '_packgqa' in kn(r)]
    print(' ', pr['batch'],pr['seqlen_q'],pr['seqlen_k'],pr['heads_q'],pr['heads_kv'],pr['dtype'],pr.get('kv_layout'), 'best', rs[0]['median_ms'] if rs else None, rs[0].get('kernel', rs[0].get('key')) if rs else None, 'unsplit', un[0]['median_ms'] if un else None, 'split', sp[0]['median_ms'] if sp else None, 'packed', pk[0]['median_ms'] if pk else None, 'vendor', p.get('vendor_ms'), p.get('best_over_vendor'), sum(1 for r in p['results'] if r.get('verified')), len(p['results']))
"
cd $OUT && tar czf all.tgz *.json *.txt *.log 2>/dev/null; ls

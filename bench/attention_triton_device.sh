#!/usr/bin/env bash
# Issue 38, the Triton route's speed on one NVIDIA GPU host (sm_90), one device call under 6 minutes:
#   1. triton_attention's dense sm_90 specs the benched problems need (head dim 128 causal and not,
#      f16/bf16: every dense tile, unpacked and GQA-packed (PACK_GQA 1: the decode batch's candidates
#      16 x 128 and 16 x 64); head dim 64 f16 not causal), built there by the host's own Triton
#      (the GPU machine's Triton 3.6 is the llvm22 lane's; a host's Triton must equal the builder's);
#   2. bench --run-from-cache --candidates all --verify (one run per problem) over
#      bench/problems/models/attention.json's triton_attention problems 0, 1, 3, 4, 5 (Llama-3-8B and
#      Qwen2-7B prefill 1 x 4096 causal, ViT-B/16, the decode batch 64 x 1 over 2048 and its paged twin,
#      block 16: no vendor time) beside torch
#      SDPA (flash / cuDNN, the faster as the vendor), every output checked against the float64
#      reference;
#   3. the GPU test of every triton_attention sm_90 spec (dense, packed varlen, paged; unpacked and
#      GQA-packed: 136, built there by the host's Triton, so it may need its own call) against torch
#      float64 (scripts/gpu-tests.sh: needs the --tests wheels);
#   4. if time is left: the native attention family on problems 0 and 4 (the same bench), for the
#      row beside it.
# Each step has its own timeout, all within 320 s of the start (the site install included); everything lands in $OUT/all.tgz (one
# file: the device returns at most 8), with timeline.txt and summary.txt also beside it.
# Environment (defaults in brackets): TRI_PROBLEMS the triton_attention problems [0 4 5 3 1], NATIVE_PROBLEMS
# the native ones [0 4; empty: none], ATT_BUDGET the seconds of the whole call [320], NATIVE_WHERE the native build's filters [head dim 128, f16, causal; "" builds every
# sm_90 spec], GPU_TEST_K the GPU tests' -k [every_sm90_spec], TRI_PROBLEM_S one triton bench's cap [100 s: the
# head dim 128 prefills run 8 candidates since the tutorial's Hopper tiles; the fourth call's 4 took 36 s].
# Usage (repository root): here `bash scripts/gpu-wheels.sh --tests && bash bench/attention_triton_device.sh --prepare`,
# then the device call carrying [".whl", ".state/att-tri"]: OUT=$OUT bash bench/attention_triton_device.sh
if [ "${1:-}" = "--prepare" ]; then  # the CPU side: the carried cache (see below)
  set -e; mkdir -p .state/att-tri; rm -f .state/att-tri/cache.sqlite*
  for hd in 128 64; do
    .venv/bin/python -m rocke_aot.cli build --arch sm_90 --lane llvm22 --family triton_attention --where VARLEN=0 \
        --where PAGED=0 --where HEAD_DIM=$hd --cache .state/att-tri/cache.sqlite -j "$(nproc)" --json > /dev/null
  done
  # the paged decode batch (problem 5: f16, head dim 128, causal, equal lengths): its unpacked and packed tiles
  .venv/bin/python -m rocke_aot.cli build --arch sm_90 --lane llvm22 --family triton_attention --where VARLEN=0 \
      --where PAGED=1 --where HEAD_DIM=128 --where dtype=f16 --where CAUSAL=1 --cache .state/att-tri/cache.sqlite \
      -j "$(nproc)" --json > /dev/null
  .venv/bin/python -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" \
      .state/att-tri/cache.sqlite
  echo "carry [\".whl\", \".state/att-tri\"] and run: OUT=\$OUT bash bench/attention_triton_device.sh"; exit 0
fi
T0=$(date +%s); source scripts/gpu-site.sh >/dev/null 2>&1; export PATH=$PATH:/usr/local/cuda/bin
st(){ echo "[$(( $(date +%s)-T0 )) s] $*" | tee -a $OUT/timeline.txt; }
left(){ echo $(( ${ATT_BUDGET:-320} - ($(date +%s)-T0) )); }  # ATT_BUDGET: seconds for the whole call
W=/tmp/att-tri; rm -rf $W; mkdir -p $W; C=$W/cache.sqlite; RA="$PY -m rocke_aot.cli"
st "site ready; $($PY -c 'import triton, torch; print("triton", triton.__version__, "torch", torch.__version__, torch.cuda.get_device_name(0))' 2>&1 | tail -1)"
# The GPU host registers no Triton lane (its Triton is the system python's), so the triton_attention
# kernels are built on the CPU side and carried: `bash bench/attention_triton_device.sh --prepare` there
# (.state/att-tri/cache.sqlite, the dense head dim 128 and 64 sm_90 specs by the llvm22 lane's Triton 3.6,
# the GPU host's version); this call copies it. Without it, the build below is tried here (and refused).
if [ -f .state/att-tri/cache.sqlite ]; then
  cp .state/att-tri/cache.sqlite $C; st "cache carried: $(du -h $C | cut -f1)"
else
  B="$RA build --arch sm_90 --lane llvm22 --family triton_attention --cache $C -j 16 --where VARLEN=0 --where PAGED=0"
  timeout 100 $B --where HEAD_DIM=128 --json > $OUT/build-triton-128.json 2> $OUT/build-triton-128.log; st "build d128 rc=$? $(tail -1 $OUT/build-triton-128.log)"
  timeout 60 $B --where HEAD_DIM=64 --where dtype=f16 --where CAUSAL=0 --json > $OUT/build-triton-64.json 2> $OUT/build-triton-64.log; st "build d64 rc=$? $(tail -1 $OUT/build-triton-64.log)"
fi
$PY - <<'PY'
import json; d=json.load(open('bench/problems/models/attention.json'))
for i in (0, 1, 3, 4, 5):
    json.dump({"triton_attention": [d["triton_attention"][i]]}, open(f'/tmp/att-tri/triton-{i}.json', 'w'))
import os; nat = [int(i) for i in os.environ.get("NATIVE_PROBLEMS", "0 4").split()]
json.dump({"attention": [d["attention"][i] for i in nat]}, open('/tmp/att-tri/native.json', 'w'))
PY
# one bench per problem (each writes its own report: a timeout loses one problem, not all), the most
# telling first: Llama prefill, the decode batch, its paged twin (no vendor time: SDPA cannot state it), ViT,
# Qwen prefill (bf16)
for i in ${TRI_PROBLEMS:-0 4 5 3 1}; do  # TRI_PROBLEMS: a subset, in order
  T=$(left); [ $T -gt ${TRI_PROBLEM_S:-100} ] && T=${TRI_PROBLEM_S:-100}
  [ $T -gt 10 ] || { st "triton bench $i skipped: $T s left"; continue; }
  timeout $T $RA bench --run-from-cache --arch sm_90 --family triton_attention --lane llvm22 --problems $W/triton-$i.json --cache $C --candidates all --verify --out $OUT/bench-triton_attention-$i.json > $OUT/bench-triton_attention-$i.txt 2>&1; st "triton bench problem $i rc=$?"
done
T=$(left); [ $T -gt 180 ] && T=180
if [ -z "${NATIVE_PROBLEMS-0 4}" ]; then st "native skipped: NATIVE_PROBLEMS is empty"
elif [ $T -gt 60 ]; then
  timeout $(( T / 3 )) $RA build --arch sm_90 --lane llvm22 --family attention --cache $C -j 16 ${NATIVE_WHERE---where head_dim=128 --where dtype=f16 --where causal=1} --json > $OUT/build-native.json 2> $OUT/build-native.log; st "native build rc=$? $(tail -1 $OUT/build-native.log)"
  T=$(left); [ $T -gt 150 ] && T=150; [ $T -gt 10 ] && { timeout $T $RA bench --run-from-cache --arch sm_90 --family attention --lane llvm22 --problems $W/native.json --cache $C --candidates all --verify --out $OUT/bench-attention.json > $OUT/bench-attention.txt 2>&1; st "native bench rc=$?"; }
else st "native skipped: $T s left"; fi
# the GPU tests last (GPU_TEST_K: the pytest -k expression; every_sm90_native_spec for the native family's)
T=$(left); [ $T -gt 150 ] && T=150
if [ $T -gt 30 ]; then timeout $T bash scripts/gpu-tests.sh -q -k "${GPU_TEST_K:-every_sm90_spec}" > $OUT/gpu-tests.txt 2>&1; st "gpu test rc=$? $(tail -1 $OUT/gpu-tests.txt)"; else st "gpu test skipped: $T s left"; fi
$RA cache ls --cache $C --json > $W/ls.json 2>/dev/null
$PY - > $OUT/summary.txt 2>&1 <<PY
import json
try: specs = {e['key']: e.get('spec') for e in json.load(open('$W/ls.json'))}
except Exception as e: specs = {}; print('no cache listing:', e)
def cfg(k):
    s = specs.get(k) or {}
    return ' '.join(f'{n}={s[n]}' for n in ('BLOCK_M', 'BLOCK_N', 'num_warps', 'num_stages', 'PACK_GQA', 'path', 'block_n', 'warps', 'split', 'paged', 'varlen') if n in s)
for f in [f'bench-triton_attention-{i}.json' for i in (0, 1, 3, 4, 5)] + ['bench-attention.json']:
    try: d = json.load(open('$OUT/' + f))
    except Exception as e: print(f, 'missing:', e); continue
    print(f, d.get('device'), d.get('triton_version'), d.get('summary'))
    for p in d['problems']:
        pr = p['problem']; rs = sorted([r for r in p['results'] if r.get('median_ms')], key=lambda r: r['median_ms'])
        print(' ', pr['batch'], pr['seqlen_q'], pr['seqlen_k'], pr['heads_q'], pr['heads_kv'], pr['head_dim'], pr['dtype'],
              'causal' if pr['causal'] else '', 'vendor', p.get('vendor'), p.get('vendor_ms'), 'best/vendor', p.get('best_over_vendor'),
              'verified', sum(1 for r in p['results'] if r.get('verified')), 'of', len(p['results']))
        for r in rs: print('     ', round(r['median_ms'], 4), 'ms', round(r.get('tflops') or 0, 1), 'TFLOPS', r.get('verified'), r.get('key', '')[:12], cfg(r.get('key')), r.get('error'))
PY
cat $OUT/summary.txt; st "done"
cd $OUT && tar czf all.tgz *.json *.txt *.log 2>/dev/null; ls

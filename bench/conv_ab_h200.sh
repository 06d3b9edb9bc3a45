#!/usr/bin/env bash
# The same conv_direct_fwd problems timed on one GPU machine by today's code ("new", then again
# "new2") and by an older commit ("old"), each with its own site, cache and build: is a change
# between H200 runs the code or the machine? Prepared here (the device call carries the tree):
#     git archive OLD_COMMIT -- . ':(exclude)docs' ':(exclude)aot/goldens' ':(exclude)tests' | gzip > ab-old.tar.gz
#     PROBLEMS=problems.json   ({"conv_direct_fwd": [...]}, the bench/problems format)
# then on the device, from the repository root, carrying .whl:
#     PROBLEMS=ab-problems.json bash bench/conv_ab_h200.sh     -> $OUT/bench-{new,old,new2}.json
# 2026-12-04: docs/selection.md "Runs 18 and 20", raw bench/results/bench-raw/h200-run21-ab/.
R=$OUT; REPO=$PWD; P=$REPO/${PROBLEMS:?PROBLEMS=file of the problems}
mkdir -p /tmp/old && tar xzf ab-old.tar.gz -C /tmp/old && ln -sf $REPO/.whl /tmp/old/.whl
for V in new old new2; do
  D=$REPO; [ $V = old ] && D=/tmp/old
  ( cd $D && export ROCKE_AOT_GPU_SITE=/tmp/site-$V && source scripts/gpu-site.sh >/dev/null 2>&1
    export ROCKE_AOT_HOME=/tmp/home-$V; mkdir -p $ROCKE_AOT_HOME; C=/tmp/home-$V/cache.sqlite
    RA() { "$PY" -c 'import sys; from rocke_aot.cli.main import main; sys.argv[0]="rocke-aot"; main()' "$@"; }
    cd /tmp
    [ -f $C ] || RA build --arch sm_90 --lane llvm22 --family conv_direct_fwd --problems $P --cache $C -j 16 --json > $R/build-$V.json 2> $R/build-$V.log
    RA bench --run-from-cache --arch sm_90 --family conv_direct_fwd --problems $P --cache $C \
       --candidates all --no-verify --warmup 1 --reps 3 --out $R/bench-$V.json --json > /dev/null 2> $R/bench-$V.log
    echo "$V rc=$?" )
done

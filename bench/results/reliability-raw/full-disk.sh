#!/usr/bin/env bash
# A build into a 2 MiB tmpfs with LEFT_KIB (default 120) KiB left after the store's schema; then space is
# freed, the same store is verified and the build rerun. Root, from the repository root:
#   bash docs/reliability-raw/full-disk.sh
set -u
R=.venv/bin/rocke-aot
GRID=(--arch gfx942 --family gemm --lane llvm22 --where path=fma --where block_m=32 --where block_n=32
      --where block_k=32 --where waves=2 --where in_dtype=f16 --jobs 2)
D=$(mktemp -d); mount -t tmpfs -o size=2m tmpfs "$D"
U="sqlite:///$D/cache.sqlite"
$R cache stats --cache "$U" >/dev/null                      # schema only
avail=$(df --output=avail -B1 "$D" | tail -1)
head -c $((avail - ${LEFT_KIB:-120} * 1024)) /dev/zero > "$D/filler"
echo "\$ df -h $D"; df -h "$D" | tail -1
echo "\$ rocke-aot build ${GRID[*]} --cache $U"
$R build "${GRID[@]}" --cache "$U"; echo "-> exit $?"
echo "\$ sqlite3: artifacts stored"; python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select count(*) from artifacts where status='ok'\").fetchone()[0])" "$D/cache.sqlite"
rm "$D/filler"; echo "(filler removed)"
echo "\$ rocke-aot cache verify --cache $U"; $R cache verify --cache "$U"; echo "-> exit $?"
echo "\$ rocke-aot build ... (rerun)"; $R build "${GRID[@]}" --cache "$U"; echo "-> exit $?"
echo "\$ rocke-aot cache verify --cache $U"; $R cache verify --cache "$U"; echo "-> exit $?"
umount "$D"; rmdir "$D"

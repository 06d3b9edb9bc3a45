#!/usr/bin/env bash
# Bad cache URLs through the real binary: each line shows the URL, stderr and the exit code.
# Run as root from the repository root: bash docs/reliability-raw/bad-cache-urls.sh
set -u
R=.venv/bin/rocke-aot
T=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# a server that accepts and never answers (a hung or firewalled PostgreSQL)
python3 -c 'import socket,time; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(8); print(s.getsockname()[1], flush=True); time.sleep(600)' > "$T/silent" &
SILENT=$!; until [ -s "$T/silent" ]; do sleep 0.2; done; silent=$(head -1 "$T/silent")
# a read-only store: a real cache on a tmpfs remounted read-only (root ignores file modes)
mkdir "$T/ro"; mount -t tmpfs -o size=4m tmpfs "$T/ro"
$R cache stats --cache "$T/ro/c.sqlite" >/dev/null; mount -o remount,ro "$T/ro"
for u in "mysql://h/d" "sqlite:////nonexistent/dir/x.db" "/nonexistent/dir/x.db" "sqlite:///$T" "sqlite://" \
         "$T/ro/c.sqlite" "postgresql+psycopg://u:secret@127.0.0.1:$port/d" \
         "postgresql+psycopg://u:secret@127.0.0.1:$silent/d?connect_timeout=3" \
         "postgresql://u:secret@nohost.invalid/d" "postgresql+psycopg://u:secret@127.0.0.1:notaport/d"; do
  for cmd in stats gc; do
    start=$(date +%s.%N)
    out=$($R cache $cmd --cache "$u" 2>&1); rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    tb=$(grep -c Traceback <<<"$out")
    printf '$ rocke-aot cache %s --cache %s\n%s\n-> exit %s, %s s, tracebacks %s\n\n' "$cmd" "$u" "$out" "$rc" "$secs" "$tb"
  done
done
ls -d /nonexistent 2>/dev/null && echo "BUG: /nonexistent was created" || echo "/nonexistent was not created"
umount "$T/ro"; kill $SILENT; rm -rf "$T"

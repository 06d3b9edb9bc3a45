#!/bin/sh
# tuf-conformance (github.com/theupdateframework/tuf-conformance) against the host client, by
# hand: the suite is not on PyPI and its source is not committed here.
#
#   git clone https://github.com/theupdateframework/tuf-conformance /tmp/tufc
#   bash bench/tuf_conformance.sh /tmp/tufc [extra pytest args]
#
# The suite (run with this worktree's .venv: python-tuf, pytest) drives
# bench/tuf-conformance-client (rocke_aot/client/conformance.py) through its client-under-test
# protocol; faketime is installed if missing (scripts/setup.sh installs it on dev machines).
# Exit 0 only if the failures are exactly the ones bench/tuf-conformance-client.xfails names
# (one per line, "# reason" above each); the run's summary is printed for bench/results/.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
suite=${1:?usage: bash bench/tuf_conformance.sh SUITE_DIR [pytest args]}
shift
command -v faketime >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq faketime; }
log=$(mktemp)
cd "$suite"
set +e
PYTHONPATH="$suite" "$here/../.venv/bin/python" -m pytest -q -p no:cacheprovider -rfE tuf_conformance \
    --entrypoint "$here/tuf-conformance-client" "$@" >"$log" 2>&1
set -e
tail -n 40 "$log"
failed=$(sed -n 's/^FAILED [^:]*::\([^ ]*\).*/\1/p' "$log" | sort -u)
expected=$(grep -v '^#' "$here/tuf-conformance-client.xfails" | sed '/^$/d' | sort -u)
if [ "$failed" != "$expected" ]; then
    echo "unexpected: failed [$failed], expected failures [$expected]"
    exit 1
fi
echo "tuf-conformance: only the expected failures ($(echo "$expected" | grep -c . || true))"

"""Recording the arch-domain characterization: `python -m devtools.characterize --out variants/characterization`.

    rocke_aot.aot.characterize.domain(lanes?, arches?)   the product's own probes (every
        toolchain on this host, every wired arch; a lane without a toolchain is a named skip)
    ─> write_recorded(docs, OUT) ─> OUT/<lane>.json, one per probed lane

`rocke-aot characterize --check` (the product, read-only) compares a fresh run with the
records it ships as package data (variants/characterization/); docs/variants.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from rocke_aot import lanes
from rocke_aot.aot import characterize as ch
from rocke_aot.arch import ARCHES
from rocke_aot.errors import LaneError, RockeError, SpecError


def write_recorded(docs: Mapping[str, Mapping], out: Path) -> list[Path]:
    """Write each lane's document to OUT/<lane>.json (the layout ch.load_recorded reads)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for lane, doc in docs.items():
        path = ch.record_path(lanes.get_lane(lane, source="a document's lane"), out)
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.characterize", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path,
                    help="the directory to write <lane>.json into (the product's: variants/characterization)")
    ap.add_argument("--lane", action="append", default=[], help="only this lane (repeatable)")
    ap.add_argument("--arch", action="append", default=[], choices=list(ARCHES), help="only this arch (repeatable)")
    ap.add_argument("--jobs", type=int, default=4, help="probes in flight")
    a = ap.parse_args(argv)
    try:
        only = [lanes.get_lane(x, source="--lane") for x in a.lane] or None
        fresh, skips = ch.domain(only, a.arch or None, jobs=max(1, a.jobs))
        for path in write_recorded(fresh, a.out):
            print(f"wrote {path}")
    except (LaneError, SpecError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except RockeError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    for what, why in skips.items():
        print(f"skipped {what}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Which stored rows a release may sign, and every row it leaves out with the reason.

    signable_rows(store, arches, lanes) -> (rows, left_out)
        store.find(served_only=True), page by page (what select serves), of the selected arches/lanes
        ├─ entered by a build here, or verified by one since (cache/provenance.py) ──┐
        │     else LeftOut(reason: "published through the service and never verified ...")
        └─ its launch contract equals the family's formulas (variants/contract.py) ──┴─> rows
              else LeftOut(reason: the LaunchContractError; a family not installed here too:
              its contract cannot be recomputed, so it is not vouched for)

A release signs ``rows`` only; ``left_out`` goes into its summary (``rocke-aot trust sign
--json``: "left_out"), so an operator sees what a publish or an import brought that no build here
made. trust/release.py calls it; nothing else decides what is signed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rocke_aot.cache.keys import thaw
from rocke_aot.cache.provenance import why_unsigned
from rocke_aot.cache.records import Artifact
from rocke_aot.errors import RockeError
from rocke_aot.variants.contract import check_record_launch

PAGE = 1000
MAX_REASON = 300  # characters of one left-out reason


@dataclass(frozen=True)
class LeftOut:
    key: str
    family: str
    arch: str
    lane: str
    entered: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_row(a: Artifact) -> str | None:
    """None if ``a`` may be signed, else why not (one bounded sentence)."""
    why = why_unsigned(a.entered, a.verified_at)
    if why is not None:
        return why
    try:
        check_record_launch(a.family, thaw(a.spec), a.arch, thaw(a.metadata))
    except RockeError as e:
        return f"{type(e).__name__}: {e}"[:MAX_REASON]
    return None


def signable_rows(store, arches: Iterable[str] = (), lanes: Iterable[str] = ()
                  ) -> tuple[list[Artifact], list[LeftOut]]:
    """(rows a release may sign, rows it leaves out with reasons), of what ``store`` serves for the
    selected arches and lanes (module doc)."""
    want_arch, want_lane = set(arches), set(lanes)
    rows: list[Artifact] = []
    left: list[LeftOut] = []
    cursor = None
    while True:
        page = store.find(served_only=True, after=cursor, limit=PAGE)
        for a in page:
            if (want_arch and a.arch not in want_arch) or (want_lane and a.lane not in want_lane):
                continue
            why = check_row(a)
            if why is None:
                rows.append(a)
            else:
                left.append(LeftOut(a.key, a.family, a.arch, a.lane, a.entered, why[:MAX_REASON]))
        if len(page) < PAGE:
            break
        cursor = page[-1].key
    return rows, left


__all__ = ["LeftOut", "check_row", "signable_rows"]

"""The signed index as a store selection can rank: select where there is no service.

    SignedIndex(fetcher)          a Fetcher with a pinned root key (mirrors, or offline: what the
                                  host verified last); its accepted() metadata, read once
    candidates(family, device, lanes, compatible_only=, current_only=)
        every kernel target of the verified metadata (Accepted.entries: every bin, verified by
        python-tuf where online), of ``family``, built for a target ID the device can run
        (compatible_only, else any of its processor's: selection rejects those by name), of a
        lane asked
        ──> its record's inputs hash to its key (Kernel.from_record): a signed record that names
            other inputs (or malformed resources) is never ranked: skipped, logged and counted
            (``malformed``), as the store's selection view treats a malformed row
        ──> candidates.candidate_of (the one reader of an artifact's fields the store's own
            selection view uses): Resources from the signed metadata's "code_object", the
            launch block's work-group size, the Triton version its toolchain names
        ──> tuple[Candidate, ...], kept per question (select()'s ranking memo reuses a tuple)

service/selection.py select(SignedIndex(...), target, family, problem, ...) is then the very
select the service runs (cli/select.py --mirror): the same admission rules (variants/selection.py
rank: incompatible target, stale generation, another lane or Triton version, the spec's
admission of the problem, the efficiency floor) and the same order. What the signed index lacks,
next to the service's store: recorded times (cache/measurements.py; not signed), so the rank is the
time model's (the service too ranks by the model where nothing was measured); rows a release did
not sign (not served, unverified publishes, failures), so ``explain`` lists no "stale generation"
rejections. Every signed kernel is served: ``current`` is always True. ``created_at`` is the
record's provenance "built_at" where it holds one, else the epoch (no rank reads it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rocke_aot.candidates import Candidate, candidate_of
from rocke_aot.client.local import Kernel
from rocke_aot.errors import RockeError, SpecError
from rocke_aot.targets import Target, compatible_ids, processor_ids

if TYPE_CHECKING:
    from rocke_aot.client.fetch import Fetcher

log = logging.getLogger("rocke_aot.client")
EPOCH = datetime.fromtimestamp(0, tz=timezone.utc)


def _created_at(prov: Any) -> datetime:
    v = prov.get("built_at") if isinstance(prov, dict) else None
    if isinstance(v, int | float) and not isinstance(v, bool):
        try:
            return datetime.fromtimestamp(v, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return EPOCH
    return EPOCH


class SignedIndex:
    """Candidates from the verified signed metadata (module doc)."""

    def __init__(self, fetcher: Fetcher):
        if fetcher.trusted is None:
            raise SpecError("a select over the signed index needs a pinned root key (an insecure Fetcher has no "
                            "signed metadata)")
        self.fetcher = fetcher
        self._lists: dict[tuple, tuple[Candidate, ...]] = {}
        self.malformed = 0  # signed records skipped (logged): inputs that hash to another key, bad resources

    @property
    def version(self) -> int:
        """The snapshot version ranked."""
        return self.fetcher.accepted().version

    def candidates(self, family: str, device: Target, lanes: Iterable[str] | None = None, *,
                   compatible_only: bool = True, current_only: bool = False) -> tuple[Candidate, ...]:
        if not isinstance(family, str):
            raise SpecError(f"family must be a string, got {family!r}")
        lane_set = None if lanes is None else frozenset(lanes)
        shape = (family, device.id, lane_set, compatible_only)
        got = self._lists.get(shape)
        if got is None:
            got = self._lists[shape] = tuple(self._read(family, device, lane_set, compatible_only))
        return got

    def _read(self, family: str, target: Target, lanes: frozenset[str] | None, compatible_only: bool):
        ids = frozenset(compatible_ids(target) if compatible_only else processor_ids(target))
        info = target.info
        out = []
        for key, rec in self.fetcher.accepted().entries(family):
            if rec.get("family") != family:
                continue
            try:
                k = Kernel.from_record({**rec, "key": key, "origin": {}})  # inputs hash to the key
                if k.inputs.arch not in ids or (lanes is not None and k.inputs.lane not in lanes):
                    continue
                out.append(candidate_of(key, k.sha256, family, rec.get("spec"), k.inputs.arch, k.inputs.lane,
                                        k.inputs.profile, rec.get("generation"), True, rec.get("metadata"),
                                        _created_at(rec.get("provenance")), rec.get("toolchain"), info))
            except (RockeError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
                # as the store's selection view treats a malformed row: never ranked, logged, counted
                self.malformed += 1
                log.error("signed index (snapshot version %s): kernel %s skipped by select, its record is malformed "
                          "(%s: %s)", self.version, key, type(e).__name__, e)
        return sorted(out, key=lambda c: c.key)

"""Cache audit: re-lower stored artifacts with the current code and look for digest holes.

    store.find(status="ok")                       every artifact (no blobs loaded)
        │ recipe_digest == family_digest(family) ?  only "same key" rows: a row stored under
        │   no ──> skipped (other recipe)           another recipe is unreachable anyway
        │   (family_digest: recipe_digest() for a built-in family, plus the plugin's own code
        │    for a plugin's; a family not installed here is skipped too)
        ▼ sample N (seeded, reproducible)
    lower(family, spec, arch, lane).ir_sha256  ──  == stored ir_sha256 ──> ok
                                               └─  != ──> HOLE: the key did not move, yet the
                                                   current code lowers other IR, so the cache
                                                   may serve a binary this code would not make
    lowering raises ──> error (the current code refuses what it once built: also a hole)

A hole means the recipe rule (aot/recipe.py) misses something that shapes the IR: a module
read outside the import graph, a data file, an environment variable.

Every row, of any recipe, is also checked for what the IR cannot show (cache/provenance.py,
variants/contract.py): a row no build here made or verified (published, imported, fetched, or
older than provenance) is flagged ``unverified`` with how it entered (the IR sha256 a publisher
sends says nothing about its bytes); a row whose launch contract is not its family's formulas is
a hole. ``rocke-aot cache audit`` exits 1 on any hole, error or unverified row.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rocke_aot.aot.lower import lower
from rocke_aot.aot.recipe import family_digest, recipe_digest
from rocke_aot.cache.keys import thaw
from rocke_aot.cache.provenance import why_unsigned
from rocke_aot.errors import RockeError, SpecError
from rocke_aot.variants.contract import check_record_launch


@dataclass(frozen=True)
class Hole:
    key: str
    family: str
    arch: str
    lane: str
    stored_ir_sha256: str | None
    current_ir_sha256: str | None  # None: the current code refused to lower it
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Unverified:
    key: str
    family: str
    arch: str
    lane: str
    entered: str  # how it entered: import | publish | fetch | legacy
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class AuditReport:
    recipe_digest: str
    artifacts: int  # every artifact in the store
    same_recipe: int  # of those, stored under the current recipe digest
    checked: int  # re-lowered (all same-recipe ones, or the sample)
    holes: tuple[Hole, ...]
    unverified: tuple[Unverified, ...] = ()  # rows no build here made or verified (every recipe)

    @property
    def ok(self) -> bool:
        return not self.holes and not self.unverified

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "recipe_digest": self.recipe_digest, "artifacts": self.artifacts,
                "same_recipe": self.same_recipe, "checked": self.checked,
                "skipped_other_recipe": self.artifacts - self.same_recipe,
                "holes": [h.as_dict() for h in self.holes],
                "unverified": [u.as_dict() for u in self.unverified]}


def audit(store, *, sample: int | None = None, seed: int = 0) -> AuditReport:
    """Re-lower the artifacts stored under the current recipe digest (all, or ``sample`` of
    them chosen with ``seed``) and report every one whose IR differs from its record."""
    if sample is not None and (not isinstance(sample, int) or isinstance(sample, bool) or sample < 1):
        raise SpecError(f"audit sample must be a positive integer, got {sample!r}")
    current = recipe_digest()
    arts = store.find(status="ok")
    digests: dict[str, str | None] = {}
    for fam in {a.family for a in arts}:
        try:
            digests[fam] = family_digest(fam)
        except RockeError:  # a family not installed (or broken) here: its rows cannot be re-lowered
            digests[fam] = None
    same = [a for a in arts if a.recipe_digest == digests[a.family]]
    chosen = same if sample is None or sample >= len(same) else random.Random(seed).sample(same, sample)
    holes = []
    unverified = []
    for a in arts:  # every row: how it entered, and its contract against its family (no lowering: cheap)
        why = why_unsigned(a.entered, a.verified_at)
        if why is not None:
            unverified.append(Unverified(a.key, a.family, a.arch, a.lane, a.entered, why))
        if digests[a.family] is None:
            continue  # a family not installed here: nothing to recompute the contract from
        try:
            check_record_launch(a.family, thaw(a.spec), a.arch, thaw(a.metadata))
        except RockeError as e:
            holes.append(Hole(a.key, a.family, a.arch, a.lane, a.ir_sha256, a.ir_sha256,
                              f"{type(e).__name__}: {str(e)[:300]}"))
    for a in sorted(chosen, key=lambda a: a.key):
        try:
            ir_sha = lower(a.family, thaw(a.spec), a.arch, a.lane).ir_sha256
        except RockeError as e:
            holes.append(Hole(a.key, a.family, a.arch, a.lane, a.ir_sha256, None, f"{type(e).__name__}: {e}"))
            continue
        if ir_sha != a.ir_sha256:
            holes.append(Hole(a.key, a.family, a.arch, a.lane, a.ir_sha256, ir_sha))
    return AuditReport(current, len(arts), len(same), len(chosen), tuple(holes),
                       tuple(sorted(unverified, key=lambda u: u.key)))

"""The plans part of a store: the builder's questions besides the plan index itself.

    builder, a plan miss ──lower──> code-object key ──lookup_code_objects──> compiled already?
        (cache/code_objects.py: what the compiler consumed -> blob, or the compiler's refusal)
    builder, before compiling ──claim(keys, holder, lease)──> the keys now ours; renew_claims
        while compiling, release_claims after (cache/claims.py: leases that end if a claimant dies)
    builder, after a build that ran to the end ──complete_generation(id)──> its rows serve
    select / the CLI ──current_generation / generations──> which generation serves, with counts
        (cache/generations.py: per (arch, lane, family), ranked; served flags per spec)
    Store.import_ ──adopt_imported()──> imported rows join the generation of their inputs and
        get their code objects, then their groups are re-served

Each method is one transaction over the SQL of the module named; the SQL lives there.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from rocke_aot.cache import claims, code_objects, db, generations
from rocke_aot.cache.code_objects import CodeHit
from rocke_aot.cache.generations import Generation
from rocke_aot.cache.keys import check_key
from rocke_aot.errors import NotFoundError
from rocke_aot.targets import Target


class Plans:
    """Generations, code objects and build claims of one store (module doc)."""

    def __init__(self, handle: db.Handle):
        self.handle = handle

    # ---- generations --------------------------------------------------------------------

    def current_generation(self, target: Target, lane: str, family: str) -> str | None:
        with db.read_tx(self.handle.engine) as conn:
            return generations.newest_complete(conn).get((target.id, lane, family))

    def generations(self, target: Target | None = None, lane: str | None = None,
                    family: str | None = None) -> list[Generation]:
        with db.read_tx(self.handle.engine) as conn:
            return generations.listing(conn, None if target is None else target.id, lane, family)

    def complete_generation(self, generation: str) -> None:
        self.handle.writable("complete_generation")
        with db.write_tx(self.handle.engine) as conn:
            if not generations.complete(conn, generation, time.time()):
                raise NotFoundError(f"no generation {generation} in {self.handle}")

    def adopt_imported(self) -> None:
        """Rows an import wrote without a generation or code object get theirs; their groups re-serve."""
        with db.write_tx(self.handle.engine) as conn:
            now = time.time()
            touched = generations.backfill(conn, now)
            code_objects.backfill(conn, now)
            generations.reserve_groups(conn, touched)

    # ---- code objects -------------------------------------------------------------------

    def lookup_code_objects(self, keys: Iterable[str]) -> dict[str, CodeHit]:
        wanted = sorted(set(keys))
        for k in wanted:
            check_key(k)
        with db.read_tx(self.handle.engine) as conn:
            return code_objects.lookup(conn, wanted, db.LOOKUP_CHUNK)

    # ---- claims -------------------------------------------------------------------------

    def claim(self, keys: Iterable[str], holder: str, lease_s: float, host: str | None = None) -> list[str]:
        self.handle.writable("claim")
        wanted = sorted(set(keys))
        with db.write_tx(self.handle.engine, exclusive=True) as conn:
            return claims.claim(conn, wanted, holder, time.time(), lease_s, db.LOOKUP_CHUNK, host)

    def renew_claims(self, keys: Iterable[str], holder: str, lease_s: float) -> int:
        self.handle.writable("claim")
        with db.write_tx(self.handle.engine) as conn:
            return claims.renew(conn, sorted(set(keys)), holder, time.time(), lease_s, db.LOOKUP_CHUNK)

    def release_claims(self, keys: Iterable[str], holder: str) -> int:
        self.handle.writable("claim")
        with db.write_tx(self.handle.engine) as conn:
            return claims.release(conn, sorted(set(keys)), holder, db.LOOKUP_CHUNK)

    def claimed_by_others(self, keys: Iterable[str], holder: str, host: str | None = None) -> set[str]:
        with db.read_tx(self.handle.engine) as conn:
            return claims.held_by_others(conn, sorted(set(keys)), holder, time.time(), db.LOOKUP_CHUNK, host)

"""Code objects keyed by what the compiler consumed, generations per family, served rows, claims.

Revision ID: 0006_ir_keys
Revises: 0002_recipe_options
Create Date: 2026-12-03

- ``code_objects``: one row per code-object key (keys.code_object_key: target ID, emission
  profile, IR sha256, toolchain identity, compile options). Backfilled from every 'ok'
  artifact that recorded its IR sha256, so a rebuild under a new recipe digest finds the
  code objects it already has and compiles nothing whose IR did not move. Cubins get no PTX
  here (it was never stored): a cubin is compiled again once, then reused.
- ``artifacts.code_key`` (that key) and ``artifacts.served`` (which row of a spec is served).
- ``generations`` gain ``family`` and ``completed_at``: a generation is now per (arch, lane,
  family), so a build of one family never touches another's. Each old generation is split
  per family; a generation a ref pointed at is complete since the ref moved, a retired one
  since it was retired, one never current is not complete. ``refs`` goes: what it said is now
  ``completed_at`` plus the served flags.
- ``claims``: build leases (aot/builder/claims.py).

Nothing is deleted and no artifact key changes, so nothing is rebuilt. Every spec served
before is served after (the row a ref made current ranks first); specs that only a
non-current generation holds are served too (generations now serve side by side).
"""

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from rocke_aot.cache.keys import code_object_key

revision = "0006_ir_keys"
down_revision = "0002_recipe_options"
branch_labels = None
depends_on = None

_GEN_PREFIX = b"rocke-aot/generation/v2\n"  # cache/generations.generation_id, frozen here


def _gen_id(*parts: str) -> str:
    h = hashlib.sha256(_GEN_PREFIX)
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def upgrade() -> None:
    op.create_table(
        "code_objects",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("arch", sa.String(128), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("ir_sha256", sa.String(64), nullable=False),
        sa.Column("toolchain_json", sa.Text, nullable=False),
        sa.Column("options_json", sa.Text, nullable=False),
        sa.Column("blob_sha256", sa.String(64), sa.ForeignKey("blobs.sha256", name="fk_code_objects_blob"),
                  nullable=True),
        sa.Column("info_json", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("built_at", sa.Float, nullable=False),
        sa.CheckConstraint(
            "(status = 'ok' AND blob_sha256 IS NOT NULL AND error IS NULL)"
            " OR (status = 'failed' AND blob_sha256 IS NULL AND error IS NOT NULL)",
            name="ck_code_objects_status_shape",
        ),
    )
    op.create_index("ix_code_objects_blob", "code_objects", ["blob_sha256"])
    op.create_table(
        "claims",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("claimed_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.add_column("artifacts", sa.Column("code_key", sa.String(64), nullable=True))
    op.add_column("artifacts", sa.Column("served", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_artifacts_spec", "artifacts", ["arch", "lane", "family", "spec_json"])
    op.create_index("ix_artifacts_code_key", "artifacts", ["code_key"])
    op.add_column("generations", sa.Column("family", sa.String(128), nullable=False, server_default=""))
    op.add_column("generations", sa.Column("completed_at", sa.Float, nullable=True))
    conn = op.get_bind()
    _split_generations(conn)
    op.drop_table("refs")
    _backfill_code_objects(conn)
    _serve(conn)
    op.execute("UPDATE rocke_meta SET value = '6' WHERE name = 'schema_version'")


def _split_generations(conn) -> None:
    refs = {g: moved for g, moved in conn.execute(sa.text("SELECT generation, moved_at FROM refs"))}
    old = conn.execute(sa.text(
        "SELECT id, arch, lane, recipe_digest, toolchain_json, created_at, retired_at FROM generations")).all()
    for gid, arch, lane, digest, tc_json, created, retired in old:
        completed = refs.get(gid, retired)
        fams = conn.execute(sa.text("SELECT DISTINCT family FROM artifacts WHERE generation = :g"),
                            {"g": gid}).scalars().all()
        for fam in sorted(fams):
            new = _gen_id(arch, lane, fam, digest, tc_json)
            conn.execute(sa.text(
                "INSERT INTO generations (id, arch, lane, recipe_digest, toolchain_json, created_at, family, "
                "completed_at) VALUES (:i, :a, :l, :d, :t, :c, :f, :done)"),
                {"i": new, "a": arch, "l": lane, "d": digest, "t": tc_json, "c": created, "f": fam,
                 "done": completed})
            conn.execute(sa.text("UPDATE artifacts SET generation = :n WHERE generation = :g AND family = :f"),
                         {"n": new, "g": gid, "f": fam})
        conn.execute(sa.text("DELETE FROM generations WHERE id = :g"), {"g": gid})


def _backfill_code_objects(conn) -> None:
    rows = conn.execute(sa.text(
        "SELECT key, arch, profile, ir_sha256, toolchain_json, options_json, blob_sha256, metadata_json, built_at "
        "FROM artifacts WHERE status = 'ok' AND ir_sha256 IS NOT NULL ORDER BY built_at, key")).all()
    seen: set[str] = set()
    for key, arch, profile, ir, tc_json, opt_json, blob, meta_json, built in rows:
        ck = code_object_key(arch, profile, ir, tc_json, opt_json)
        conn.execute(sa.text("UPDATE artifacts SET code_key = :c WHERE key = :k"), {"c": ck, "k": key})
        if ck in seen:
            continue
        seen.add(ck)
        fmt = (json.loads(meta_json) or {}).get("format")
        conn.execute(sa.text(
            "INSERT INTO code_objects (key, status, arch, profile, ir_sha256, toolchain_json, options_json, "
            "blob_sha256, info_json, error, built_at) VALUES (:k, 'ok', :a, :p, :i, :t, :o, :b, :info, NULL, :w)"),
            {"k": ck, "a": arch, "p": profile, "i": ir, "t": tc_json, "o": opt_json, "b": blob,
             "info": json.dumps({"format": fmt}, sort_keys=True, separators=(",", ":")), "w": built})


def _serve(conn) -> None:
    gens = {gid: (completed is not None, completed or 0.0, created, gid) for gid, completed, created in
            conn.execute(sa.text("SELECT id, completed_at, created_at FROM generations"))}
    best: dict[tuple, tuple] = {}
    for key, arch, lane, fam, sj, gid in conn.execute(sa.text(
            "SELECT key, arch, lane, family, spec_json, generation FROM artifacts WHERE status = 'ok'")):
        if gid not in gens:
            continue
        r = gens[gid] + (key,)
        g = (arch, lane, fam, sj)
        if g not in best or r > best[g]:
            best[g] = r
    for r in best.values():
        conn.execute(sa.text("UPDATE artifacts SET served = 1 WHERE key = :k"), {"k": r[-1]})


def downgrade() -> None:
    """Back to one generation per (arch, lane) and a ref to the newest complete one (what a
    0002_recipe_options store serves); code objects and claims go, artifacts stay."""
    conn = op.get_bind()
    op.create_table(
        "refs",
        sa.Column("arch", sa.String(128), primary_key=True),
        sa.Column("lane", sa.String(32), primary_key=True),
        sa.Column("generation", sa.String(32), nullable=False),
        sa.Column("moved_at", sa.Float, nullable=False),
    )
    rows: Sequence[tuple[Any, ...]] = conn.execute(sa.text(
        "SELECT id, arch, lane, recipe_digest, toolchain_json, created_at, completed_at FROM generations")).all()
    made: dict[str, tuple] = {}
    newest: dict[tuple[str, str], tuple[float, str]] = {}
    for gid, arch, lane, digest, tc_json, created, completed in rows:
        h = hashlib.sha256(b"rocke-aot/generation/v1\n")
        for p in (arch, lane, digest, tc_json):
            h.update(p.encode() + b"\0")
        v1 = h.hexdigest()[:32]
        made.setdefault(v1, (arch, lane, digest, tc_json, created))
        conn.execute(sa.text("UPDATE artifacts SET generation = :n WHERE generation = :g"), {"n": v1, "g": gid})
        if completed is not None and ((arch, lane) not in newest or completed > newest[(arch, lane)][0]):
            newest[(arch, lane)] = (completed, v1)
    conn.execute(sa.text("DELETE FROM generations"))
    for v1, (arch, lane, digest, tc_json, created) in sorted(made.items()):
        conn.execute(sa.text("INSERT INTO generations (id, arch, lane, recipe_digest, toolchain_json, created_at, "
                             "family) VALUES (:i, :a, :l, :d, :t, :c, '')"),
                     {"i": v1, "a": arch, "l": lane, "d": digest, "t": tc_json, "c": created})
    for (arch, lane), (when, v1) in sorted(newest.items()):
        conn.execute(sa.text("INSERT INTO refs (arch, lane, generation, moved_at) VALUES (:a, :l, :g, :m)"),
                     {"a": arch, "l": lane, "g": v1, "m": when})
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("completed_at")
        batch.drop_column("family")
    op.drop_index("ix_artifacts_code_key", "artifacts")
    op.drop_index("ix_artifacts_spec", "artifacts")
    with op.batch_alter_table("artifacts") as batch:
        batch.drop_column("served")
        batch.drop_column("code_key")
    op.drop_table("claims")
    op.drop_index("ix_code_objects_blob", "code_objects")
    op.drop_table("code_objects")
    op.execute("UPDATE rocke_meta SET value = '5' WHERE name = 'schema_version'")

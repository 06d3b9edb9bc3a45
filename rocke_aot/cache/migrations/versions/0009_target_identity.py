"""Code-object keys hold the toolchain identity of their target's format only.

Revision ID: 0009_target_identity
Revises: 0008_triton_entries
Create Date: 2026-12-05

Before, the llvmlite toolchain's identity named both the linker and ptxas for every target, so
an HSACO's key moved with the CUDA install and a cubin's with ld.lld: the same gfx942 kernels,
byte-identical, got other keys on a builder with another ptxas. Now a key holds what shapes
that target's bytes (targets.FORMAT_TOOLS: an HSACO's the linker, a cubin's ptxas).

Every ``code_objects`` row is re-keyed by today's ``keys.code_object_key``, which hashes the
identity as the target's format sees it (targets.target_identity), and stores that identity;
``artifacts.code_key`` follows. Rows that differed only in the other format's tool become
one (an 'ok' row wins over a recorded failure, then the oldest): their bytes were made by the
same compiler and the same tool of their own format. Plan keys (``artifacts.key``) are not
rewritten (signed metadata, measurements and hosts' stores name them): the next build plans
new keys, lowers (cheap), finds every code object under its new key and compiles nothing
whose bytes are equal. Downgrade keeps the new keys: older code misses them and compiles again.
"""

import json

import sqlalchemy as sa
from alembic import op

from rocke_aot.cache.keys import canonical_json, code_object_key
from rocke_aot.targets import target_identity

revision = "0009_target_identity"
down_revision = "0008_triton_entries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.text(
        "SELECT key, status, arch, profile, ir_sha256, toolchain_json, options_json, built_at "
        "FROM code_objects")).all()
    groups: dict[str, list] = {}
    for row in rows:
        new = code_object_key(row.arch, row.profile, row.ir_sha256, row.toolchain_json, row.options_json)
        groups.setdefault(new, []).append(row)
    for new, members in groups.items():
        members.sort(key=lambda r: (r.status != "ok", r.built_at, r.key))
        keep, drop = members[0], members[1:]
        tc = canonical_json(target_identity(json.loads(keep.toolchain_json), keep.arch))
        for r in drop:
            conn.execute(sa.text("DELETE FROM code_objects WHERE key = :k"), {"k": r.key})
        if keep.key != new or keep.toolchain_json != tc:
            conn.execute(sa.text("UPDATE code_objects SET key = :new, toolchain_json = :tc WHERE key = :old"),
                         {"new": new, "tc": tc, "old": keep.key})
        for r in members:
            if r.key != new:
                conn.execute(sa.text("UPDATE artifacts SET code_key = :new WHERE code_key = :old"),
                             {"new": new, "old": r.key})
    op.execute("UPDATE rocke_meta SET value = '9' WHERE name = 'schema_version'")


def downgrade() -> None:
    op.execute("UPDATE rocke_meta SET value = '8' WHERE name = 'schema_version'")

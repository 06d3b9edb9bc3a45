"""A key holds what shapes its target's bytes: the toolchain identity per code format
(targets.FORMAT_TOOLS: an HSACO's key the LLVM and the linker, a cubin's the LLVM and ptxas).

The builds here are real (llvmlite's LLVM, Debian's ld.lld, CUDA's ptxas). The tools' versions are
varied through the identity's own inputs: ROCKE_AOT_PTXAS / ROCKE_AOT_LLD name wrapper scripts
that report another version line and run the real tool, one of them with a flag that really
changes the bytes (ptxas -O0, ld.lld --build-id). The reference for "the bytes are equal" is
the stored blobs' sha256, compared across stores built under each identity.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

import rocke_aot.cache as cache_pkg
from rocke_aot.aot import builder
from rocke_aot.aot.compiler.lld import find_lld, linker_identity
from rocke_aot.aot.compiler.ptx import find_ptxas, ptxas_identity
from rocke_aot.aot.toolchains import LlvmliteToolchain, comgr, triton24, triton_jit, vendor23
from rocke_aot.aot.toolchains.base import Toolchain, tool_identity
from rocke_aot.cache import db, models
from rocke_aot.cache.keys import canonical_json, code_object_key
from rocke_aot.cache.store import Store
from rocke_aot.lanes import get_lane
from rocke_aot.targets import FORMAT_TOOLS, TOOL_FIELDS, Target, target_identity

ARCHES = [Target.parse("gfx942"), Target.parse("sm_90")]
WHERE = {"path": "fma", "block_m": "64", "block_n": "64", "block_k": "32", "waves": "4"}


def _wrap(tmp: Path, name: str, real: str, version: str, extra: str = "") -> str:
    """An executable that answers --version with ``version`` and otherwise runs ``real`` (with
    ``extra`` after the caller's own arguments: the last -O wins)."""
    p = tmp / name
    p.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{version}"; exit 0; fi\nexec {real} "$@" {extra}\n')
    p.chmod(0o755)
    return str(p)


def _rows(store: Store) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(arch, spec) -> (plan key, code key, blob sha256) of every 'ok' row."""
    with store.engine.connect() as c:
        return {(a, s): (k, ck, b) for k, a, s, ck, b in c.execute(text(
            "SELECT key, arch, spec_json, code_key, blob_sha256 FROM artifacts WHERE status = 'ok'"))}


def _build(store: Store, toolchains=None) -> dict:
    return builder.build(arches=ARCHES, families=["gemm"], lanes=[get_lane("llvm22")], store=store,
                         toolchains=toolchains, where=WHERE).data


# ------------------------------------------------------------------ the rule, declared once


def test_every_toolchain_kind_names_only_known_tools_and_the_tools_write_their_declared_fields(llvm22):
    kinds = [LlvmliteToolchain, vendor23.Vendor23Toolchain, triton24.Triton24Toolchain,
             comgr.ComgrToolchain, triton_jit.TritonToolchain]
    for k in kinds:
        assert set(k.tools) <= set(TOOL_FIELDS), (k, k.tools)
    assert LlvmliteToolchain.tools == ("linker", "ptxas")
    assert vendor23.Vendor23Toolchain.tools == triton24.Triton24Toolchain.tools == ("linker",)
    assert comgr.ComgrToolchain.tools == triton_jit.TritonToolchain.tools == ()  # they link inside themselves
    assert set(linker_identity()) == set(TOOL_FIELDS["linker"]) == set(tool_identity("linker"))
    assert set(ptxas_identity()) == set(TOOL_FIELDS["ptxas"]) == set(tool_identity("ptxas"))
    assert {f for t in FORMAT_TOOLS.values() for f in t} == set(TOOL_FIELDS)
    assert Target.parse("gfx942").code_format == "hsaco" and Target.parse("sm_90").code_format == "cubin"


def test_llvmlite_identity_is_a_function_of_the_target_format(llvm22):
    core = llvm22.core_identity()
    amd, nv = llvm22.identity(Target.parse("gfx942")), llvm22.identity(Target.parse("sm_90"))
    assert amd == {**core, **linker_identity()} and "ptxas" not in amd and "ptxas_sha256" not in amd
    assert nv == {**core, **ptxas_identity()} and "linker" not in nv and "linker_sha256" not in nv
    with open(find_ptxas(), "rb") as f:
        assert nv["ptxas_sha256"] == hashlib.file_digest(f, "sha256").hexdigest()
    with open(find_lld(), "rb") as f:
        assert amd["linker_sha256"] == hashlib.file_digest(f, "sha256").hexdigest()
    # every gfx target shares the HSACO identity; the key's projection is the identity itself
    assert llvm22.identity(Target.parse("gfx1250")) == llvm22.identity(Target.parse("gfx942:sramecc+:xnack-")) == amd
    for t in ("gfx942", "sm_90"):
        assert target_identity(llvm22.identity(Target.parse(t)), t) == llvm22.identity(Target.parse(t))
    # an identity written before the rule (both tools) keys its code object where today's does
    old = {**core, **linker_identity(), **ptxas_identity()}
    for t in ("gfx942", "sm_90"):
        tid = Target.parse(t).id
        assert (code_object_key(tid, "llvm22", "0" * 64, canonical_json(old), "{}")
                == code_object_key(tid, "llvm22", "0" * 64, canonical_json(llvm22.identity(Target.parse(t))), "{}"))


# ------------------------------------------------------------------ keys vs bytes, real builds


def test_same_specs_under_two_ptxas_and_two_linker_identities(tmp_path, monkeypatch):
    ptxas, lld = find_ptxas(), find_lld()
    configs = {  # name -> (ptxas wrapper, ld.lld wrapper); B of each really changes its format's bytes
        "base": (_wrap(tmp_path, "ptxas-a", ptxas, "Cuda compilation tools, release 13.0, V13.0.88"),
                 _wrap(tmp_path, "lld-a", lld, "Debian LLD 22.1.8")),
        "ptxas-b": (_wrap(tmp_path, "ptxas-b", ptxas, "Cuda compilation tools, release 13.5, V13.5.37", "-O0"),
                    str(tmp_path / "lld-a")),
        "lld-b": (str(tmp_path / "ptxas-a"),
                  _wrap(tmp_path, "lld-b", lld, "Homebrew LLD 22.1.9", "--build-id=sha1")),
    }
    rows = {}
    for name, (p, link) in configs.items():
        monkeypatch.setenv("ROCKE_AOT_PTXAS", p)
        monkeypatch.setenv("ROCKE_AOT_LLD", link)
        with Store.open(f"sqlite:///{tmp_path}/{name}.sqlite", create=True) as s:
            summary = _build(s, [LlvmliteToolchain()])
            assert summary["failed"] == [] and summary["built"] >= 2 * len(ARCHES), summary
            rows[name] = _rows(s)
    specs = sorted(rows["base"])
    assert all(sorted(r) == specs for r in rows.values())
    n_amd = sum(a.startswith("gfx") for a, _ in specs)
    n_nv = len(specs) - n_amd
    assert n_amd >= 2 and n_nv >= 2

    def compare(a: str, b: str, arch_prefix: str) -> tuple[int, int, int, int]:
        """(equal plan keys, equal code keys, equal blobs, rows) over one format's rows."""
        got = [(rows[a][s], rows[b][s]) for s in specs if s[0].startswith(arch_prefix)]
        for (ka, ca, ba), (kb, cb, bb) in got:  # one key never names two different byte strings
            assert ka != kb or ba == bb
            assert ca != cb or ba == bb
        return (sum(x[0] == y[0] for x, y in got), sum(x[1] == y[1] for x, y in got),
                sum(x[2] == y[2] for x, y in got), len(got))

    # Another ptxas: every HSACO keeps its keys (equal bytes); every cubin gets new keys (new bytes).
    assert compare("base", "ptxas-b", "gfx") == (n_amd, n_amd, n_amd, n_amd)
    assert compare("base", "ptxas-b", "sm_") == (0, 0, 0, n_nv)
    # Another ld.lld: every cubin keeps its keys (equal bytes); every HSACO gets new keys (new bytes).
    assert compare("base", "lld-b", "sm_") == (n_nv, n_nv, n_nv, n_nv)
    assert compare("base", "lld-b", "gfx") == (0, 0, 0, n_amd)


# ------------------------------------------------------------------ an old store migrates


_OLD_CODE_PREFIX = b"rocke-aot/code-object-key/v1\n"


def _old_code_key(arch, profile, ir, tc_json, opt_json) -> str:
    """The code-object key as rocke-aot wrote it before the per-format rule (the identity as
    given, unprojected): the reference the migration must move away from."""
    body = canonical_json({"arch": arch, "ir_sha256": ir, "options": json.loads(opt_json), "profile": profile,
                           "toolchain": json.loads(tc_json)})
    return hashlib.sha256(_OLD_CODE_PREFIX + body.encode()).hexdigest()


# Each code object with the identity its plan rows hold (the old code stored that one).
_OLD_ROWS = ("SELECT o.key, o.arch, o.profile, o.ir_sha256, a.toolchain_json, o.options_json "
             "FROM code_objects o JOIN artifacts a ON a.code_key = o.key GROUP BY o.key")


class _BothTools(Toolchain):
    """llvmlite as it was keyed before the rule: the linker and ptxas for every target."""

    kind = "llvmlite"

    def __init__(self, tc: LlvmliteToolchain):
        self.tc = tc

    def detect(self):
        return self.tc.detect()

    def core_identity(self):
        return self.tc.core_identity()

    def identity(self, target):
        return {**self.tc.core_identity(), **linker_identity(), **ptxas_identity()}

    def compile_options(self, target):
        return self.tc.compile_options(target)

    def compile(self, *a, **kw):
        return self.tc.compile(*a, **kw)


def test_a_store_keyed_by_the_old_identity_migrates_and_rebuilds_nothing(tmp_path, llvm22):
    url = f"sqlite:///{tmp_path}/old.sqlite"
    with Store.open(url, create=True) as s:
        old = _build(s, [_BothTools(llvm22)])
        assert old["failed"] == [] and old["compiles"] == old["built"] > 0
        # What the old code wrote: code objects under the unprojected key, artifacts pointing there.
        with db.write_tx(s.engine, exclusive=True) as c:
            for key, arch, prof, ir, tc, opt in c.execute(text(_OLD_ROWS)).all():
                assert "ptxas" in json.loads(tc) and "linker" in json.loads(tc)
                ok = _old_code_key(arch, prof, ir, tc, opt)
                assert ok != key  # the old key is not today's: without the migration, everything recompiles
                c.execute(text("UPDATE code_objects SET key = :o, toolchain_json = :t WHERE key = :k"),
                          {"o": ok, "t": tc, "k": key})
                c.execute(text("UPDATE artifacts SET code_key = :o WHERE code_key = :k"), {"o": ok, "k": key})
            cfg = Config()
            cfg.set_main_option("script_location", str(Path(cache_pkg.__file__).parent / "migrations"))
            cfg.attributes["connection"] = c
            command.downgrade(cfg, "0008_triton_entries")
    with Store.open(url) as s:  # upgrades to head: 0009 re-keys the code objects
        with s.engine.connect() as c:
            assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() == models.HEAD_REVISION
            objs = c.execute(text("SELECT key, arch, profile, ir_sha256, toolchain_json, options_json "
                                  "FROM code_objects")).all()
            for key, arch, prof, ir, tc, opt in objs:
                ident = json.loads(tc)
                gfx = arch.startswith("gfx")
                assert ("ptxas" in ident) != gfx and ("linker" in ident) == gfx
                assert key == code_object_key(arch, prof, ir, tc, opt) == _old_code_key(arch, prof, ir, tc, opt)
            refs = set(c.execute(text("SELECT code_key FROM artifacts WHERE status = 'ok'")).scalars())
            assert refs == {o[0] for o in objs}
        again = _build(s, [llvm22])
        # new plan keys (the identity changed); every code object is found under its re-keyed key, but
        # the rows predate provenance (rev 0010_provenance: 'legacy'), so each is compiled once and
        # compared: the same bytes, none replaced. Then nothing is compiled again.
        assert again["failed"] == [] and again.get("replaced", []) == []
        assert again["compiles"] == old["built"]
        third = _build(s, [llvm22])
        assert third["failed"] == [] and third["compiles"] == 0 and third["cached"] == old["built"]


def test_migration_merges_rows_that_differed_only_in_the_other_formats_tool(tmp_path, llvm22):
    """Two builders with different CUDA installs stored the same HSACO twice; it becomes one."""
    url = f"sqlite:///{tmp_path}/two.sqlite"
    with Store.open(url, create=True) as s:
        _build(s, [_BothTools(llvm22)])
        with db.write_tx(s.engine, exclusive=True) as c:
            rows = c.execute(text(
                "SELECT o.*, a.toolchain_json AS old_tc FROM code_objects o JOIN artifacts a ON a.code_key = o.key "
                "GROUP BY o.key")).mappings().all()
            n = len(rows)
            for r in rows:
                r = {**{k: v for k, v in r.items() if k != "old_tc"}, "toolchain_json": r["old_tc"]}
                tc = json.loads(r["toolchain_json"])
                ok = _old_code_key(r["arch"], r["profile"], r["ir_sha256"], r["toolchain_json"], r["options_json"])
                c.execute(text("UPDATE code_objects SET key = :o, toolchain_json = :t WHERE key = :k"),
                          {"o": ok, "t": r["toolchain_json"], "k": r["key"]})
                c.execute(text("UPDATE artifacts SET code_key = :o WHERE code_key = :k"), {"o": ok, "k": r["key"]})
                other = json.dumps({**tc, "ptxas": "Cuda compilation tools, release 12.4, V12.4.131"},
                                   sort_keys=True, separators=(",", ":"))
                twin = {**r, "toolchain_json": other, "built_at": r["built_at"] + 1,
                        "key": _old_code_key(r["arch"], r["profile"], r["ir_sha256"], other, r["options_json"])}
                c.execute(text("INSERT INTO code_objects (" + ", ".join(twin) + ") VALUES ("
                               + ", ".join(":" + k for k in twin) + ")"), twin)
            cfg = Config()
            cfg.set_main_option("script_location", str(Path(cache_pkg.__file__).parent / "migrations"))
            cfg.attributes["connection"] = c
            command.downgrade(cfg, "0008_triton_entries")
    with Store.open(url) as s, s.engine.connect() as c:
        amd = sum(r["arch"].startswith("gfx") for r in rows)
        # the HSACO twins merged (ptxas is not theirs); the cubin twins stay apart (it is)
        assert c.execute(text("SELECT count(*) FROM code_objects")).scalar() == n + (n - amd)
        assert c.execute(text("SELECT count(*) FROM artifacts a LEFT JOIN code_objects o ON o.key = a.code_key "
                              "WHERE a.status = 'ok' AND o.key IS NULL")).scalar() == 0


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_target_identity_drops_exactly_the_other_formats_tool_fields(target):
    ident = {"kind": "llvmlite", "llvm_version": "22.1.0", "linker": "L", "linker_sha256": "l",
             "ptxas": "P", "ptxas_sha256": "p", "shim_sha256:libz": "z"}
    got = target_identity(ident, target)
    keep = TOOL_FIELDS[FORMAT_TOOLS[Target.parse(target).code_format][0]]
    gone = {f for fields in TOOL_FIELDS.values() for f in fields} - set(keep)
    assert set(ident) - set(got) == gone and all(got[k] == ident[k] for k in got)

"""The store's parts meet only through public names (cache/store.py draws the layout).

Read from the source (AST, nothing imported), over every module of the product layers,
bench/ and devtools/:
- no module imports a private name (``_x``) from a rocke_aot module (one module's private
  helper used by another is how the store's parts were once held together);
- no module reads a private attribute of a rocke_aot module it imported (``mod._x``);
- no module reads a private attribute of any other object (``obj._x`` where ``obj`` is not
  ``self`` or ``cls``): the service, the CLI and the bundle code reach a store through its
  public methods and parts, never ``store._x``. Named exceptions below, each with its reason
  (a third-party binding's own API, a namedtuple's methods), and each must still be needed.
And import-linter's ``store-parts`` contract (.importlinter) keeps the layers above the cache
on Store: none imports a part, the tables, or (the service) the engine module directly.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rocke_aot.cache import store as store_mod

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("rocke_aot", "bench", "devtools")  # the product package (every layer) and the tools beside it
NAMEDTUPLE = {"_replace", "_asdict", "_fields", "_make"}  # a namedtuple's public methods
# (file, attribute): why reading it is right
EXEMPT = {
    ("aot/compiler/_comgr_handler.py", "_amd_comgr_action_kind_s__Base"): "the hip-python binding's enum base",
    ("aot/toolchains/_llvmlite_probe.py", "_name"): "llvmlite's ffi library: its file name is only there",
    ("aot/compiler/pool.py", "_closed"): "the module's own pool singleton, of a class defined beside it",
    ("aot/toolchains/_triton_worker.py", "_base32"): "Triton's cache-key encoding, which its cache manager uses too",
    ("client/wire.py", "_transport"): "httpx's transports: the socket deadline wraps their network backend",
    ("client/wire.py", "_mounts"): "httpx's proxy transports, wrapped the same way",
    ("client/wire.py", "_network_backend"): "httpcore's pool backend (tests/test_hostile_client.py)",
    ("client/local.py", "_after_check"): "Verified's only constructor, called by the two checks beside it in its module",
    ("bench/gemm_amd_isa.py", "_run"): "bench/codegen_deltas.py's tool runner, reused by its sibling bench script",
    ("bench/gemm_amd_isa.py", "_INSN_RE"): "bench/codegen_deltas.py's instruction pattern, reused by its sibling",
    ("client/conformance.py", "_trusted_set"): "python-tuf's Updater state the conformance client-under-test reports",
    ("client/trusted.py", "_trusted_set"): "python-tuf's Updater state after refresh (snapshot, targets, root): the bin step reads it",
    ("service/protocol.py", "_idle"): "the connection table reads its own protocol objects (same module)",
    ("service/protocol.py", "_peer"): "the connection table reads its own protocol objects (same module)",
    ("service/protocol.py", "_made_at"): "the connection table reads its own protocol objects (same module)",
    ("torch/ops.py", "_version"): "torch's tensor version counter: a weight's transposed copy is kept per version",
    ("torch/ops.py", "_C"): "torch's dispatcher bindings: the ops' Autograd kernel redispatches below autograd",
    ("torch/ops.py", "_after_autograd_keyset"): "the keyset below autograd, as torch.library's own custom ops use it",
    ("torch/ops.py", "_AutoDispatchBelowAutograd"): "the guard torch.library's own custom ops hold to redispatch",
    ("torch/runtime.py", "_C"): "torch._C._cuda_getCurrentRawStream: the raw stream call torch's compiled code makes",
    ("cache/bundle.py", "_proc_member"): "tarfile.TarInfo's member hook, overridden to bound a header before it is read",
    ("bench/gemm_async_h200.py", "_sleep"): "torch's device spin kernel, the hold behind timed calls (runner/run.py too)",
    ("bench/bench_hostile.py", "_source"): "a bench timing the client's bounded exchange alone (service/client.py)",
    # the Triton host of bench/bench_triton_hit.py launches each kernel through the builder's own worker
    # (loaded by path; its source is in the recipe digest, so it grows no public aliases for a bench)
    ("bench/_triton_hit_host.py", "_module"): "the builder's worker: the request's module, its sources checked",
    ("bench/_triton_hit_host.py", "_jit_function"): "the builder's worker: the JITFunction under autotune wrappers",
    ("bench/_triton_hit_host.py", "_target"): "the builder's worker: the request's GPUTarget",
    ("bench/_triton_hit_host.py", "_args"): "the builder's worker: stand-in tensors and ints bound as the build bound them",
    ("bench/_triton_hit_host.py", "_Driver"): "the builder's worker: the stand-in driver naming the target",
    ("bench/_triton_hit_host.py", "_base32"): "Triton's cache-key encoding, which its cache manager uses too",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules(root: Path, folders):
    for folder in folders:
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            # product modules are named relative to the package (aot/compiler/pool.py), tools by folder
            rel = path.relative_to(base if folder == "rocke_aot" else root).as_posix()
            yield rel, ast.parse(path.read_text(), rel)


def _violations(root: Path = ROOT, folders=FOLDERS):
    found, used = [], set()
    for rel, tree in _modules(root, folders):
        rocke_names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rocke_aot"):
                for a in node.names:
                    if _private(a.name):
                        found.append(f"{rel}:{node.lineno}: from {node.module} import {a.name}")
                    rocke_names.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("rocke_aot"):
                        rocke_names.add(a.asname or a.name.split(".")[0])
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Name) and owner.id in rocke_names:
                found.append(f"{rel}:{node.lineno}: {owner.id}.{node.attr} (a private name of a rocke_aot module)")
            elif node.attr in NAMEDTUPLE:
                continue
            elif (rel, node.attr) in EXEMPT:
                used.add((rel, node.attr))
            else:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(owner)[:60]}.{node.attr} (another object's private)")
    return found, used


def test_no_private_cross_imports_or_reads():
    found, used = _violations()
    assert found == [], "\n".join(found)
    assert used == set(EXEMPT), f"exemptions no longer needed: {sorted(set(EXEMPT) - used)}"


def test_the_scan_catches_a_private_reach(tmp_path):
    """The scan is not vacuous: the three kinds of reach it forbids are each reported."""
    bad = tmp_path / "service"
    bad.mkdir()
    (bad / "x.py").write_text(
        "from rocke_aot.cache.artifacts import _all_keys\n"
        "from rocke_aot.cache import blobs\n"
        "def f(store):\n"
        "    blobs._pair_blobs\n"
        "    return store.blobs.dicts._by_id\n")
    found, _ = _violations(tmp_path, ("service",))
    assert len(found) == 3, found
    assert any("import _all_keys" in v for v in found)
    assert any("blobs._pair_blobs" in v for v in found)
    assert any("store.blobs.dicts._by_id" in v for v in found)


def test_the_facade_is_thin():
    """Store's methods delegate: no SQL, no transaction and no engine call of its own but
    open/close (a method body is a docstring, at most one guard, and one delegation)."""
    src = Path(store_mod.__file__).read_text()
    tree = ast.parse(src)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Store"]
    fat = []
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name in ("open", "__init__", "close"):
            continue
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        text = ast.get_source_segment(src, fn)
        if len(body) > 4 or any(w in text for w in ("read_tx", "write_tx", "select(", "conn.")):
            fat.append(fn.name)
    assert fat == []
    assert "import sqlalchemy" not in src and "from sqlalchemy" not in src

"""attention: the native FlashAttention-2 style forward kernel (family half: spec, table, model).

    AttentionSpec(dtype, head_dim, causal, warps, path, block_n)
        one work-group = ``warps`` warps of 16 query rows each (BLOCK_M = 16 x warps) of one (batch,
        query head); the matrix instruction of the target (mfma 16x16x16 on gfx90a/gfx942, on gfx950
        16x16x32 where block_n is a multiple of 32 (else 16x16x16), wmma 16x16x32 on gfx1250, mma.sync
        m16n8k16 on sm_90: rows per instruction 16 everywhere, so the launch is target-independent) computes S = Q K^T and O += P V over K/V tiles of block_n keys
        (16/32/64) staged in LDS; lower.py is the lowerer half
    table   knobs warps (1, 2, 4) and block_n (16, 32, 64); refused by name: a block_n the instruction
        cannot step (wmma: 32 keys), LDS over the target's (lds_layout), head_dim 256 with block_n > 16
        on sm_90 (ptxas spills)
    launch  grid x = ceil_div(seqlen_q, BLOCK_M) * batch * heads_q (query block fastest), the same
        arguments as triton_attention's (Q, K, V, O, lengths, heads, window, scale_bits) minus Triton's
        scratch pointers
    model   accepts: head dim, causal, dtype, layout (dense / varlen / paged), the LSE (layout kernels);
        efficiency: seqlen_q over BLOCK_M and the CU granularity; work: the K/V blocks it visits;
        counts: counts.py native_counts (the hardware time model's, select's ranking; docs/attention.md
        "Selection")
    split-KV (split_kv 1; docs/attention.md "Split-KV decode"): kv_splits work-groups per query tile, the
        count a launch integer (SPLIT_MIN_KEYS, SPLIT_TARGET_GROUPS); arguments + kv_splits and the f32
        workspace W; accepts decode only (seqlen_q <= BLOCK_M); efficiency counts its work-groups and
        charges the partials' round trip
    GQA packing (pack_gqa 1, with split_kv 1; docs/attention.md "GQA-packed decode"): a tile's rows are the
        (query position, query head) pairs of one KV head's group, row r = position r // group of head
        kv * group + r % group; grid over KV heads (ceil_div(seqlen_q * heads_q, heads_kv * BLOCK_M) *
        batch * heads_kv query tiles, each split); accepts a group x seqlen_q that fits one tile;
        efficiency's row granularity is group x seqlen_q

What this kernel is (and is not yet): Q's fragments stay in registers for the whole sweep; each K/V
block is copied into LDS by the whole work-group (16-byte global loads through registers; no async copies
or double buffering yet) and every warp's K and V fragments are vector reads from there. The online
softmax runs in registers (plan.py register_plan): on AMDGPU S^T = K Q^T (a lane's accumulators are one
query row's, and P^T's fragments for O^T = V^T P^T), on sm_90 S = Q K^T (mma.sync m16n8k16: a lane's
accumulators are in two rows, and P's A fragments for O = P V); the split-KV kernels keep S and P in
shared memory (each lane of a warp's first 16 takes one row's online softmax and writes P back).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rocke_aot.arch import ArchInfo
from rocke_aot.errors import CapabilityError, SpecError
from rocke_aot.families.attention.counts import native_counts
from rocke_aot.families.attention.plan import ROWS  # query rows per warp (every target's instruction has m = 16)
from rocke_aot.families.attention.problem import DTYPES, HEAD_DIMS, AttentionProblem
from rocke_aot.families.attention.reference import REFERENCE
from rocke_aot.launch import ArgDef, LaunchFormulas
from rocke_aot.targets import Target
from rocke_aot.variants._fields import check_known
from rocke_aot.variants.families import Family
from rocke_aot.variants.models import DimGranularity, Efficiency, Model, combine, dim
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.table import FamilyTable, Refuse, Serve

WARPS = (1, 2, 4)
BLOCK_NS = (16, 32, 64)  # keys per step (K/V tile rows staged in LDS)
KV_PAD = 8  # i16 elements of padding after each LDS row of the K and V^T tiles (16 bytes: rows stay
# 16-byte aligned for the staging stores, and consecutive rows start on different banks)
SHAPES = {"mfma": "16x16x16", "wmma": "16x16x32", "mma": "m16n8k16"}
# split-KV (spec.split_kv): kv_splits = max(1, min(ceil(seqlen_k / SPLIT_MIN_KEYS), ceil(SPLIT_TARGET_GROUPS /
# query tiles))) at launch: at least 2x the CUs of the largest served GPU (MI300X/MI355X's 304, H100's 132)
# in work-groups where the keys allow, each chunk at least SPLIT_MIN_KEYS keys (so a partial's 16 x
# (head_dim + 4) f32 round trip stays small beside the chunk's K/V reads)
SPLIT_MIN_KEYS = 256
SPLIT_TARGET_GROUPS = 608


@dataclass(frozen=True)
class Geometry:
    threads: int
    wave: int
    instr: Any  # rocke_aot.mma.MmaInstr
    block_m: int
    block_n: int  # keys per step: a multiple of the instruction's n (S) and k (P V)


@dataclass(frozen=True)
class AttentionSpec:
    dtype: str = "f16"
    head_dim: int = 128
    causal: int = 0
    warps: int = 4
    path: str = "mfma"
    block_n: int = 32
    varlen: int = 0  # packed sequences (cu_seqlens_q / _k), flash-attn's varlen layout
    paged: int = 0  # K, V in blocks of a pool through a block table
    split_kv: int = 0  # 1: the split-KV decode kernel (module doc "split-KV"); absent from to_dict at 0
    pack_gqa: int = 0  # 1: a tile's rows are the (query position, query head) pairs of one KV head's group
    # (module doc "GQA packing"); with split_kv only; absent from to_dict at 0

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise SpecError(f"attention spec dtype {self.dtype!r} not in {DTYPES}")
        if self.head_dim not in HEAD_DIMS:
            raise SpecError(f"attention spec head_dim {self.head_dim!r} not in {HEAD_DIMS}")
        if self.causal not in (0, 1) or type(self.causal) is not int:
            raise SpecError(f"attention spec causal must be 0 or 1, got {self.causal!r}")
        if self.warps not in WARPS:
            raise SpecError(f"attention spec warps {self.warps!r} not in {WARPS}")
        if self.path not in SHAPES:
            raise SpecError(f"attention spec path {self.path!r} not in {tuple(SHAPES)}")
        for name in ("varlen", "paged", "split_kv", "pack_gqa"):
            if getattr(self, name) not in (0, 1) or type(getattr(self, name)) is not int:
                raise SpecError(f"attention spec {name} must be 0 or 1, got {getattr(self, name)!r}")
        if self.block_n not in BLOCK_NS or type(self.block_n) is not int:
            raise SpecError(f"attention spec block_n {self.block_n!r} not in {BLOCK_NS}")
        if self.pack_gqa and not self.split_kv:
            raise SpecError("attention spec pack_gqa 1 is built on the split-KV decode kernel (split_kv 1); "
                            "the unsplit kernels' register softmax (AMDGPU) does not take packed rows")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.split_kv:  # the specs from before the split-KV kernel keep their dict (and key)
            del d["split_kv"]
        if not self.pack_gqa:  # nor do those from before GQA packing
            del d["pack_gqa"]
        return dict(sorted(d.items()))

    @classmethod
    def from_dict(cls, d: object) -> AttentionSpec:
        check_known(cls, d, "attention spec")
        return cls(**d)  # type: ignore[arg-type]

    @property
    def kernel_name(self) -> str:
        return f"attention_{self.dtype}_d{self.head_dim}_{'causal' if self.causal else 'full'}_{self.path}_w{self.warps}_n{self.block_n}" + \
            ("_varlen" if self.varlen else "") + ("_paged" if self.paged else "") + ("_splitkv" if self.split_kv else "") + \
            ("_packgqa" if self.pack_gqa else "")

    @property
    def block_m(self) -> int:
        return ROWS * self.warps

    def geometry(self, target: Target) -> Geometry:
        from rocke_aot import mma

        t = target
        shape = SHAPES[self.path]
        if self.path == "mma":
            ins = mma.select(t.processor, "mma", self.dtype)
        else:
            if self.path == "mfma" and self.block_n % 32 == 0 and \
                    "16x16x32" in mma.shapes_for(t.processor, "mfma", self.dtype):
                shape = "16x16x32"  # gfx950: twice the K of 16x16x16, the same 16 rows (docs/attention.md)
            ins = mma.select(t.processor, self.path, self.dtype, shape)
        if ins.m != ROWS:
            raise CapabilityError(f"{ins.key} has {ins.m} rows; the attention kernel takes 16 per warp")
        wave = t.info.wave_size if t.is_amdgpu else 32
        if ins.wave_size != wave:
            raise CapabilityError(f"{ins.key} is a wave{ins.wave_size} instruction; {t.processor} runs wave{wave}")
        step = ins.n * ins.k // _gcd(ins.n, ins.k)
        if self.block_n % step:
            raise CapabilityError(f"block_n {self.block_n} is not a multiple of the {step} keys a step of "
                                  f"{ins.key} takes (S's n = {ins.n}, P V's k = {ins.k})")
        need, limit = self.lds_bytes(), t.info.lds_bytes  # sm_90: dynamic shared memory (lower.py)
        if need > limit:
            raise CapabilityError(f"{need} bytes of LDS (K and V^T tiles of {self.block_n} keys, S and P of "
                                  f"{self.block_m} rows) exceed the {limit} a work-group may use on {t.processor}")
        if need % 2:
            raise AssertionError(f"LDS of {need} bytes is not whole i16 elements")
        return Geometry(self.warps * wave, wave, ins, self.block_m, self.block_n)

    def lds_layout(self) -> tuple[tuple[str, int, int], ...]:
        """(name, elements, element bytes) of each LDS array, in allocation order (lower.py): the K and
        V^T tiles; for split-KV also S, P and the rescale factors of its softmax through shared memory
        (every other kernel's runs in registers, lower.py register_plan)."""
        bn, d, rows = self.block_n, self.head_dim, self.warps * ROWS
        kv = (("attn_k", bn * (d + KV_PAD), 2), ("attn_vt", d * (bn + KV_PAD), 2))
        if not self.split_kv:  # split-KV keeps the shared-memory softmax (lower.py)
            return kv
        return kv + (("attn_s", rows * bn, 4), ("attn_p", rows * bn, 2), ("attn_alpha", rows, 4))

    def lds_bytes(self) -> int:
        """The LDS the kernel declares: KernelModule.shared_array's sum (each array 16-byte aligned)."""
        total = 0
        for _, n, eb in self.lds_layout():
            total = (total + 15) // 16 * 16 + n * eb
        return total

    @property
    def layout(self) -> bool:
        """The varlen / paged kernel: triton_attention's arguments (the LSE output, cu_seqlens, block table)."""
        return bool(self.varlen or self.paged)

    def launch_formulas(self) -> LaunchFormulas:
        base = self._unsplit_formulas()
        if not self.split_kv:
            return base
        # split-KV: kv_splits work-groups per query tile (the split of the tile are neighbours in launch
        # order), each over ceil(seqlen_k / kv_splits) keys rounded up to block_n; kv_splits chosen from the
        # problem at launch (one build serves every length): enough work-groups to fill the GPU
        # (SPLIT_TARGET_GROUPS), never chunks under SPLIT_MIN_KEYS keys
        qtiles = base.lets[0][1]
        return LaunchFormulas(
            problem=base.problem,
            lets=(("qtiles", qtiles),
                  ("kv_splits", f"max(1, min(ceil_div(seqlen_k, {SPLIT_MIN_KEYS}), "
                                f"ceil_div({SPLIT_TARGET_GROUPS}, max(1, qtiles))))"),
                  ("tiles", "qtiles * kv_splits")),
            grid=("tiles", "1", "1"),
            args=(*base.args, ArgDef("kv_splits", "scalar", "i32", "kv_splits"),
                  ArgDef("W", "global_pointer", "f32", f"tiles * {self.workspace_words_per_group}", "workspace")))

    @property
    def workspace_words_per_group(self) -> int:
        """f32 words of the split-KV workspace per work-group: its partial O (block_m x head_dim, in
        register order), its rows' (m, l, 0, 0) and 4 words of which the first is the tile's arrival
        counter in the region of split 0 (lower.py "split-KV")."""
        return self.block_m * (self.head_dim + 4) + 4 if self.split_kv else 0

    def _unsplit_formulas(self) -> LaunchFormulas:
        bm = self.block_m
        # query tiles: ceil(seqlen_q / BLOCK_M) per (sequence, query head); packed, ceil(group * seqlen_q /
        # BLOCK_M) per (sequence, KV head), group = heads_q / heads_kv (a whole number: the problem checks)
        tiles = (f"ceil_div(seqlen_q * heads_q, heads_kv * {bm}) * batch * heads_kv" if self.pack_gqa
                 else f"ceil_div(seqlen_q, {bm}) * batch * heads_q")
        if self.layout:
            q = "total_q * heads_q * head_dim"
            kv = "kv_rows * heads_kv * head_dim"
            return LaunchFormulas(
                problem=("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "window", "scale_bits",
                         "total_q", "kv_rows", "table_width", "lse_rows", "block_size"),
                lets=(("tiles", tiles),),
                grid=("tiles", "1", "1"),
                args=(ArgDef("Q", "global_pointer", self.dtype, q, "read_only"),
                      ArgDef("K", "global_pointer", self.dtype, kv, "read_only"),
                      ArgDef("V", "global_pointer", self.dtype, kv, "read_only"),
                      ArgDef("O", "global_pointer", self.dtype, q, "write_only"),
                      ArgDef("LSE", "global_pointer", "f32", "lse_rows", "write_only"),
                      ArgDef("cu_seqlens_q", "global_pointer", "i32", "batch + 1", "read_only"),
                      ArgDef("cu_seqlens_k", "global_pointer", "i32", "batch + 1", "read_only"),
                      ArgDef("block_table", "global_pointer", "i32", "batch * table_width", "read_only"),
                      *(ArgDef(n, "scalar", "i32", n) for n in ("seqlen_q", "seqlen_k", "heads_q", "heads_kv",
                                                               "window", "scale_bits", "lse_rows", "block_size",
                                                               "table_width"))))
        q = "batch * seqlen_q * heads_q * head_dim"
        kv = "batch * seqlen_k * heads_kv * head_dim"
        return LaunchFormulas(
            problem=("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "window", "scale_bits"),
            lets=(("tiles", tiles),),
            grid=("tiles", "1", "1"),
            args=(ArgDef("Q", "global_pointer", self.dtype, q, "read_only"),
                  ArgDef("K", "global_pointer", self.dtype, kv, "read_only"),
                  ArgDef("V", "global_pointer", self.dtype, kv, "read_only"),
                  ArgDef("O", "global_pointer", self.dtype, q, "write_only"),
                  ArgDef("seqlen_q", "scalar", "i32", "seqlen_q"), ArgDef("seqlen_k", "scalar", "i32", "seqlen_k"),
                  ArgDef("heads_q", "scalar", "i32", "heads_q"), ArgDef("heads_kv", "scalar", "i32", "heads_kv"),
                  ArgDef("window", "scalar", "i32", "window"), ArgDef("scale_bits", "scalar", "i32", "scale_bits")))


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _baked(target: Target, lane: Any) -> list[dict[str, Any]]:
    unsplit = [{"dtype": dt, "head_dim": d, "causal": c, "varlen": vl, "paged": pg}
               for vl, pg in LAYOUTS for dt in DTYPES for d in HEAD_DIMS for c in (0, 1)]
    # the split-KV decode kernels of every layout, then the same with GQA packing
    return unsplit + [{**b, "split_kv": 1} for b in unsplit] + [{**b, "split_kv": 1, "pack_gqa": 1} for b in unsplit]


# (varlen, paged): dense BSHD with the whole knob grid; packed varlen, paged, paged varlen with one tile
# each (4 warps; block_n 16 at head_dim 256, where sm_90 refuses larger, else 32)
LAYOUTS = ((0, 0), (1, 0), (0, 1), (1, 1))


def _knobs(baked: Any, target: Target, lane: Any) -> dict[str, tuple]:
    if baked.get("split_kv"):  # decode: one warp (16 query rows) per work-group, block_n 32 on AMD; on sm_90
        # block_n 16 (one warp staging 32-key tiles spills under ptxas 13.5 -v: 20 bytes at head dim 128, each
        # of the 32 threads holding 16 rounds of 16-byte loads) and at head dim 256 the layout kernels' 4 warps
        # (one warp spills 60-76 bytes there even at block_n 16)
        if target.is_amdgpu:
            return {"warps": (1,), "block_n": (32,)}
        return {"warps": (4 if baked["head_dim"] == 256 else 1,), "block_n": (16,)}
    if baked["varlen"] or baked["paged"]:
        return {"warps": (4,), "block_n": (16 if baked["head_dim"] == 256 else 32,)}
    return {"warps": WARPS, "block_n": BLOCK_NS}


def _paths(target: Target, lane: Any) -> tuple[str, ...]:
    if not target.is_amdgpu:
        return ("mma",)
    return ("wmma",) if target.info.wave_size == 32 else ("mfma",)


def _make(baked: Any, knobs: Any) -> AttentionSpec:
    return AttentionSpec(**baked, **knobs)


def _check(spec: AttentionSpec, target: Target) -> None:
    spec.geometry(target)
    if not target.is_amdgpu and spec.head_dim == 256 and spec.block_n > 16:
        raise CapabilityError(
            f"head_dim 256 with block_n {spec.block_n} spills on sm_90 (ptxas 13 -v: 255 registers and "
            "4 bytes (block_n 32) / 612 bytes (block_n 64) of spill stores): 64 registers of Q fragments, 128 of "
            "O accumulators and a row's block_n scores do not fit; block_n 16 does")


TABLE = FamilyTable(
    family="attention",
    lane_decisions={"llvm20": Refuse("the native attention lowering is checked on LLVM 22 and later only"),
                    "llvm22": Serve("llvmlite's LLVM 22: AMDGPU and NVPTX"),
                    "llvm23": Serve("AMD's LLVM 23: AMDGPU"),
                    "llvm24": Serve("LLVM 24's AMDGPU code generator")},
    baked=_baked, knobs=_knobs, make_spec=_make, check=_check,
    spec_from_dict=AttentionSpec.from_dict, paths=_paths)


def accepts(spec: AttentionSpec, p: AttentionProblem) -> str | None:
    if p.dtype != spec.dtype:
        return f"the kernel is built for {spec.dtype}, the problem is {p.dtype}"
    if p.head_dim != spec.head_dim:
        return f"the kernel is built for head_dim {spec.head_dim}, the problem has {p.head_dim}"
    if bool(p.causal) != bool(spec.causal):
        return f"the kernel is built {'causal' if spec.causal else 'without a causal mask'}"
    if p.paged != bool(spec.paged):
        return f"the kernel is built for {'paged' if spec.paged else 'contiguous'} KV; the problem's is {p.kv_layout}"
    if p.varlen != bool(spec.varlen):
        return (f"the kernel is built for {'variable lengths (packed, cu_seqlens)' if spec.varlen else 'equal lengths'}"
                f"; the problem has {'variable' if p.varlen else 'equal'} lengths")
    if p.lse and not spec.layout:
        return "the dense native kernel has no LSE output (its varlen / paged kernels write it)"
    n = max(p.total_q * p.heads_q, p.kv_rows * p.heads_kv) * p.head_dim * 2
    if n > 2**31 - 1:
        return f"a tensor of {n} bytes is over the 2 GiB the kernel's 32-bit offsets address"
    if spec.split_kv:
        return _split_accepts(spec, p)
    return None


def _split_accepts(spec: AttentionSpec, p: AttentionProblem) -> str | None:
    """The split-KV decode kernel's admission: one query tile per sequence (decode, a few speculative
    tokens); its workspace under the 32-bit offsets."""
    if p.seqlen_q > spec.block_m:
        return (f"the split-KV decode kernel takes up to {spec.block_m} query rows per sequence (one tile); "
                f"seqlen_q {p.seqlen_q} is a prefill, served by the unsplit kernel")
    if spec.pack_gqa and p.group * p.seqlen_q > spec.block_m:
        return (f"the GQA-packed decode kernel takes a KV head's group x seqlen_q rows in one tile of "
                f"{spec.block_m}; {p.group} query heads x {p.seqlen_q} positions = {p.group * p.seqlen_q} "
                "do not fit: served by the unpacked kernels")
    n = spec.launch_formulas().env(p)["tiles"] * spec.workspace_words_per_group * 4
    if n > 2**31 - 1:
        return f"the split-KV workspace of {n} bytes is over the 2 GiB the kernel's 32-bit offsets address"
    return None


def efficiency(spec: AttentionSpec, p: AttentionProblem, info: ArchInfo) -> Efficiency:
    if not spec.split_kv:
        return combine([dim("seqlen_q", p.seqlen_q, spec.block_m)], spec.launch_formulas().tiles(p), info)
    # a tile's rows: seqlen_q of one query head, or packed group x seqlen_q of one KV head (decode: 1 of 16
    # rows busy unpacked, up to 16 packed; K/V read once per KV head instead of once per query head)
    rows = dim("gqa_rows", p.group * p.seqlen_q, spec.block_m) if spec.pack_gqa else \
        dim("seqlen_q", p.seqlen_q, spec.block_m)
    # split-KV: its work-groups (query tiles x kv_splits) fill the CUs (the CU granularity, by the arch's
    # CU count), less the reduction's share: each split's partial (block_m x (head_dim + 4) f32) written
    # and read back beside the chunk's K and V reads, and each chunk rounded up to whole key blocks
    env = spec.launch_formulas().env(p)
    splits = env["kv_splits"]
    chunk = -(-(-(-max(1, p.seqlen_k) // splits)) // spec.block_n) * spec.block_n
    kv = splits * chunk * spec.head_dim * 2 * 2  # K and V bytes of one tile's chunks
    reduce = splits * spec.workspace_words_per_group * 4 * 2  # the round trip runs at one split too
    keys = dim("seqlen_k", max(1, p.seqlen_k), chunk)
    share = DimGranularity("kv_split_reduction", splits, chunk, kv / (kv + reduce))
    return combine([rows, keys, share], env["tiles"], info)


def work(spec: AttentionSpec, p: AttentionProblem, target: Any) -> TileWork:
    g = spec.geometry(target)
    keys = p.seqlen_k
    store = g.block_m * spec.head_dim * 2
    if spec.split_kv:  # one chunk of the keys; the partial (f32 O, m, l) out and, in the last, all back in
        splits = spec.launch_formulas().env(p)["kv_splits"]
        keys = -(-max(1, keys) // splits)
        store = spec.workspace_words_per_group * 4 * 2
    steps = max(1, -(-keys // g.block_n))
    d = spec.head_dim
    return TileWork(threads=g.threads, steps=steps, macs_per_step=2 * g.block_m * g.block_n * d,
                    load_bytes_per_step=2 * g.block_n * d * 2, lds_wavefronts_per_step=0.0,
                    store_bytes=store, matrix=True, double_buffer=False,
                    lds_bytes=spec.lds_bytes())


MODEL = Model(accepts, efficiency, work, native_counts, reads_schedule=True)

FAMILY = Family("attention", AttentionSpec, AttentionProblem, TABLE, MODEL,
                "SDPA forward, FlashAttention-2 style from the shared lowering: MFMA / WMMA / mma.sync; "
                "BSHD, MHA/GQA/MQA, causal, sliding window; head dim 64/128/256, f16/bf16",
                reference=REFERENCE, operation="attention")

__all__ = ["FAMILY", "MODEL", "TABLE", "AttentionSpec", "Geometry"]

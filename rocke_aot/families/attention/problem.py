"""The attention problem: what a caller of SDPA forward has, validated on construction.

    AttentionProblem(batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype="f16",
                     causal=False, window=0, scale=None, kv_layout="contiguous", block_size=0,
                     seqlens_q=None, seqlens_k=None, lse=False, num_blocks=0,
                     dropout=0.0, alibi=False, mask=None)

    layout      Q, O: [batch, seqlen_q, heads_q, head_dim]; K, V: [batch, seqlen_k, heads_kv,
                head_dim] (BSHD, contiguous); with variable lengths the sequences are packed
                (flash-attn's varlen layout): Q, O [total_q, heads_q, head_dim], K, V [total_k,
                heads_kv, head_dim], sequence b's rows from cu_seqlens[b] (i32 [batch + 1], the
                prefix sums of the lengths); paged KV: K, V in blocks [num_blocks, block_size,
                heads_kv, head_dim] addressed by a block table (i32 [batch, table_width], table_width
                = ceil(seqlen_k / block_size)); num_blocks: the pool's blocks (0: exactly the blocks
                the sequences use, sum of ceil(len_k / block_size); more may be given)
    heads       MHA heads_kv == heads_q, GQA 1 < heads_kv < heads_q, MQA heads_kv == 1; query
                head h reads KV head h // (heads_q // heads_kv)
    lengths     seqlen_q / seqlen_k: every sequence's (or, with seqlens_q / seqlens_k, the
                longest: per-sequence lengths, cu_seqlens / query_start_len being their prefix sums)
    mask        causal: key j is visible to query i when j <= i + (seqlen_k - seqlen_q) (aligned at
                the bottom right, as FlashAttention 2.1+ and a decode step over a KV cache);
                window w > 0: also i + (seqlen_k - seqlen_q) - j < w (w keys up to the diagonal);
                a query that sees no key outputs 0 (and LSE -inf)
    scale       None: 1 / sqrt(head_dim); else that float (positive, finite). ``scale_bits`` is
                its float32 bit pattern, a derived field: kernels take the scale as an i32
                argument (the launch contract's scalars are integers) and bitcast it
    lse         also write the log-sum-exp of each (query, head) row, float32: [batch, heads_q,
                seqlen_q], packed [heads_q, total_q] with variable lengths (flash-attn's layouts)
    derived     (the launch formulas' integers; 0 or the derived value may be given, as a problem
                echoed as JSON reads back, any other value is refused): scale_bits, total_q (query
                rows held: the sum of the lengths), kv_rows (K / V rows held: total_k, or
                num_blocks * block_size paged), table_width, lse_rows (heads_q * total_q, 0 without LSE)

What no attention kernel serves is refused here, by name, with the reason (REFUSED; `rocke-aot
variants`, `select` and the service show it): head dims other than 64, 128 and 256 (80, 96 and
512 named), dropout, ALiBi and a float mask.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import ClassVar

from rocke_aot.dtypes import MAX_EXTENT
from rocke_aot.errors import SpecError

HEAD_DIMS = (64, 128, 256)  # what the attention kernels serve
DTYPES = ("f16", "bf16")
KV_LAYOUTS = ("contiguous", "paged")
BLOCK_SIZES = (16, 32, 64)  # paged KV: tokens per block (rocKE's attention_tiled_2d instances)

# Refused on purpose, each by name with its reason (shown by `rocke-aot variants`, raised by
# select and the service as the problem's SpecError).
REFUSED: dict[str, str] = {
    "head_dim 80": "not served: the kernels tile the head dim in powers of two (64, 128, 256); 80 would run a "
                   "128-wide kernel on zero-padded Q/K/V (1.6x the work) and no such kernel is built or verified",
    "head_dim 96": "not served: the kernels tile the head dim in powers of two (64, 128, 256); 96 would run a "
                   "128-wide kernel on zero-padded Q/K/V (1.33x the work) and no such kernel is built or verified",
    "head_dim 512": "not served: a 512-wide Q tile with streamed K/V tiles does not fit the registers and LDS of the "
                    "served tilings, and no kernel is verified for it (another library gave wrong output for 512 "
                    "on one AMD arch): refused rather than answered wrong",
    "dropout": "not served: the kernels are inference forward passes (dropout needs a random-number contract "
               "between forward and backward)",
    "alibi": "not served: no kernel adds an ALiBi bias (causal and sliding-window masks are served)",
    "float mask": "not served: an arbitrary float mask is a dense [batch, heads, seqlen_q, seqlen_k] input no kernel "
                  "reads (causal and sliding-window masks are served)",
}


def refusal(problem_like: dict) -> str | None:
    """The REFUSED entry (name: reason) a problem falls under, or None."""
    d = problem_like.get("head_dim")
    if type(d) is int and d not in HEAD_DIMS:
        name = f"head_dim {d}"
        why = REFUSED.get(name, f"not served: the kernels serve head dims {', '.join(map(str, HEAD_DIMS))}")
        return f"{name}: {why}"
    if problem_like.get("dropout"):
        return f"dropout: {REFUSED['dropout']}"
    if problem_like.get("alibi"):
        return f"alibi: {REFUSED['alibi']}"
    if problem_like.get("mask") is not None:
        return f"float mask: {REFUSED['float mask']}"
    return None


def _lengths(name: str, v: object, batch: int, longest: int) -> tuple[int, ...] | None:
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or len(v) != batch:
        raise SpecError(f"AttentionProblem.{name} must be a list of {batch} lengths (one per sequence), got {v!r}")
    for x in v:
        if type(x) is not int or not 0 <= x <= longest:
            raise SpecError(f"AttentionProblem.{name}: every length must be an int in 0..{longest}, got {x!r}")
    return tuple(v)


@dataclass(frozen=True)
class AttentionProblem:
    REFUSED: ClassVar[dict[str, str]]  # set below: what `rocke-aot variants` lists as refused
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    dtype: str = "f16"
    causal: bool = False
    window: int = 0
    scale: float | None = None
    kv_layout: str = "contiguous"
    block_size: int = 0
    seqlens_q: tuple[int, ...] | None = None
    seqlens_k: tuple[int, ...] | None = None
    lse: bool = False
    num_blocks: int = 0
    dropout: float = 0.0
    alibi: bool = False
    mask: str | None = None
    # float32 bits of the scale (module doc): derived; 0 or the derived value may be given (a problem
    # echoed as JSON reads back), any other value is refused
    scale_bits: int = 0
    total_q: int = 0
    kv_rows: int = 0
    table_width: int = 0
    lse_rows: int = 0

    def __post_init__(self) -> None:
        for name in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "window", "block_size",
                     "num_blocks", "total_q", "kv_rows", "table_width", "lse_rows"):
            v = getattr(self, name)
            if type(v) is not int:
                raise SpecError(f"AttentionProblem.{name} must be an int, got {v!r}")
            if v > MAX_EXTENT or v > 2**31 - 1:
                raise SpecError(f"AttentionProblem.{name} must be < 2**31, got {v}")
            low = 1 if name in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim") else 0
            if v < low:
                raise SpecError(f"AttentionProblem.{name} must be >= {low}, got {v}")
        for name in ("causal", "lse", "alibi"):
            if type(getattr(self, name)) is not bool:
                raise SpecError(f"AttentionProblem.{name} must be true or false, got {getattr(self, name)!r}")
        if type(self.dropout) not in (int, float) or not 0.0 <= self.dropout < 1.0:
            raise SpecError(f"AttentionProblem.dropout must be a probability in [0, 1), got {self.dropout!r}")
        if self.mask is not None and not isinstance(self.mask, str):
            raise SpecError(f"AttentionProblem.mask must be null or a mask kind such as 'float', got {self.mask!r}")
        why = refusal({"head_dim": self.head_dim, "dropout": self.dropout, "alibi": self.alibi, "mask": self.mask})
        if why:
            raise SpecError(f"attention problem refused: {why}")
        if self.dtype not in DTYPES:
            raise SpecError(f"AttentionProblem.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.heads_q % self.heads_kv:
            raise SpecError(f"AttentionProblem: heads_q ({self.heads_q}) must be a multiple of heads_kv "
                            f"({self.heads_kv}) (MHA, GQA, MQA)")
        if self.kv_layout not in KV_LAYOUTS:
            raise SpecError(f"AttentionProblem.kv_layout must be one of {KV_LAYOUTS}, got {self.kv_layout!r}")
        if self.kv_layout == "paged" and self.block_size not in BLOCK_SIZES:
            raise SpecError(f"AttentionProblem: paged KV takes block_size in {BLOCK_SIZES}, got {self.block_size}")
        if self.kv_layout == "contiguous" and self.block_size:
            raise SpecError("AttentionProblem: block_size is for paged KV (kv_layout 'paged')")
        object.__setattr__(self, "seqlens_q", _lengths("seqlens_q", self.seqlens_q, self.batch, self.seqlen_q))
        object.__setattr__(self, "seqlens_k", _lengths("seqlens_k", self.seqlens_k, self.batch, self.seqlen_k))
        s = self.scale
        if s is not None and (type(s) not in (int, float) or not math.isfinite(s) or s <= 0):
            raise SpecError(f"AttentionProblem.scale must be a positive finite number or null, got {s!r}")
        value = 1.0 / math.sqrt(self.head_dim) if s is None else float(s)
        bits = struct.unpack("<i", struct.pack("<f", value))[0]
        if bits == 0 or not math.isfinite(struct.unpack("<f", struct.pack("<i", bits))[0]):
            raise SpecError(f"AttentionProblem.scale {s!r} is not a finite float32")
        if self.scale_bits not in (0, bits):
            raise SpecError(f"AttentionProblem.scale_bits is derived from the scale ({bits} for {value!r}); "
                            f"got {self.scale_bits!r}: give the scale instead")
        object.__setattr__(self, "scale_bits", bits)
        lens_q, lens_k = self.lengths()
        paged = self.kv_layout == "paged"
        width = -(-self.seqlen_k // self.block_size) if paged else 0
        used = sum(-(-n // self.block_size) for n in lens_k) if paged else 0
        if not paged and self.num_blocks:
            raise SpecError("AttentionProblem: num_blocks is for paged KV (kv_layout 'paged')")
        if paged and self.num_blocks and self.num_blocks < used:
            raise SpecError(f"AttentionProblem: the sequences use {used} blocks of {self.block_size}; a pool of "
                            f"num_blocks={self.num_blocks} cannot hold them")
        object.__setattr__(self, "num_blocks", (self.num_blocks or used) if paged else 0)
        derived = {"total_q": sum(lens_q), "table_width": width,
                   "kv_rows": self.num_blocks * self.block_size if paged else sum(lens_k)}
        derived["lse_rows"] = self.heads_q * derived["total_q"] if self.lse else 0
        for name, value in derived.items():
            if getattr(self, name) not in (0, value):
                raise SpecError(f"AttentionProblem.{name} is derived ({value} for this problem); got "
                                f"{getattr(self, name)!r}: leave it out")
            object.__setattr__(self, name, value)

    @property
    def softmax_scale(self) -> float:
        """The scale as the kernels apply it: the float32 value of ``scale_bits``."""
        return struct.unpack("<f", struct.pack("<i", self.scale_bits))[0]

    @property
    def varlen(self) -> bool:
        return self.seqlens_q is not None or self.seqlens_k is not None

    @property
    def paged(self) -> bool:
        return self.kv_layout == "paged"

    @property
    def total_k(self) -> int:
        """Key rows over every sequence (the packed K / V of a contiguous varlen problem)."""
        return sum(self.lengths()[1])

    @property
    def group(self) -> int:
        """Query heads per KV head (1: MHA; heads_q: MQA)."""
        return self.heads_q // self.heads_kv

    def lengths(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(query lengths, key lengths) of every sequence."""
        return (self.seqlens_q or (self.seqlen_q,) * self.batch, self.seqlens_k or (self.seqlen_k,) * self.batch)


# what `rocke-aot variants` lists for every family of this problem type (cli/variants.py)
AttentionProblem.REFUSED = REFUSED

__all__ = ["BLOCK_SIZES", "DTYPES", "HEAD_DIMS", "KV_LAYOUTS", "REFUSED", "AttentionProblem", "refusal"]

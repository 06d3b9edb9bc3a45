"""Blob encoding: zstd on the way in, decompress + size + sha256 check on every way out.

    raw code object ──sha256──> blob id
          └──zstd(level)──> stored bytes ──(DB / bundle)──> decode(stored, sha256, size)
                                                             ├─ zstd error      -> IntegrityError
                                                             ├─ size mismatch   -> IntegrityError
                                                             ├─ sha256 mismatch -> IntegrityError
                                                             └─ raw bytes (only when all match)

The decompressor is bounded by the recorded size, so a corrupt or hostile frame can
never expand into more memory than the code object it claims to be.
"""

from __future__ import annotations

import hashlib
import threading

import zstandard

from rocke_aot.errors import IntegrityError

CODEC = "zstd"
CODEC_DICT = "zstd-dict"  # zstd with a trained dictionary (blobs.dict_id)
# bench/bench_cache.py measured levels on real code objects (docs/cache.md): the ratio
# climbs to level 15 and is flat after it (with a trained dictionary 15 and 19 tie), while
# compressing costs about 1 ms per kernel at 15 and 2-3 ms at 19; decompression speed does
# not depend on the level. A write-once, read-many cache takes the knee: 15.
DEFAULT_LEVEL = 15

_local = threading.local()  # zstd contexts are not thread-safe; one per thread


def _ctx_cache(name: str) -> dict:
    cache = getattr(_local, name, None)
    if cache is None:
        cache = {}
        setattr(_local, name, cache)
    return cache


def _cctx(level: int, zdict: Dictionary | None = None) -> zstandard.ZstdCompressor:
    cache = _ctx_cache("cctx")
    k = (level, zdict.sha256 if zdict else None)
    if k not in cache:
        cache[k] = zstandard.ZstdCompressor(level=level, write_content_size=True,
                                            dict_data=zdict.zstd if zdict else None)
    return cache[k]


def _dctx(zdict: Dictionary | None = None) -> zstandard.ZstdDecompressor:
    cache = _ctx_cache("dctx")
    k = zdict.sha256 if zdict else None
    if k not in cache:
        cache[k] = zstandard.ZstdDecompressor(dict_data=zdict.zstd) if zdict else zstandard.ZstdDecompressor()
    return cache[k]


class Dictionary:
    """A trained zstd dictionary, identified by the sha256 of its bytes."""

    __slots__ = ("data", "sha256", "zstd")

    def __init__(self, data: bytes, sha256: str | None = None):
        self.data = bytes(data)
        self.sha256 = sha256_hex(self.data)
        if sha256 is not None and sha256 != self.sha256:
            raise IntegrityError(f"zstd dictionary {sha256}: its bytes hash to {self.sha256}")
        self.zstd = zstandard.ZstdCompressionDict(self.data)


def train(samples: list[bytes], size: int) -> Dictionary:
    return Dictionary(zstandard.train_dictionary(size, samples).as_bytes())


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode(raw: bytes, level: int = DEFAULT_LEVEL, zdict: Dictionary | None = None) -> bytes:
    return _cctx(level, zdict).compress(raw)


def decode(
    stored: bytes,
    sha256: str,
    size: int,
    codec: str = CODEC,
    stored_size: int | None = None,
    zdict: Dictionary | None = None,
) -> bytes:
    """The verified raw bytes of a stored blob, or IntegrityError naming the blob.

    Strict: bytes after the frame (even a second valid frame) are corruption too, as is a
    stored length other than the recorded one. ``zdict`` is required for "zstd-dict".
    """
    if codec not in (CODEC, CODEC_DICT):
        raise IntegrityError(f"blob {sha256}: unknown codec {codec!r}")
    if (codec == CODEC_DICT) != (zdict is not None):
        raise IntegrityError(f"blob {sha256}: codec {codec!r} but dictionary {'given' if zdict else 'missing'}")
    if stored_size is not None and len(stored) != stored_size:
        raise IntegrityError(f"blob {sha256}: {len(stored)} stored bytes, recorded {stored_size}")
    try:
        claimed = zstandard.frame_content_size(bytes(stored))
        if claimed != size:  # refuse before allocating what a corrupt header claims
            raise IntegrityError(f"blob {sha256}: frame claims {claimed} bytes, recorded size is {size}")
        raw = _dctx(zdict).decompress(bytes(stored), max_output_size=max(size, 1), allow_extra_data=False)
    except zstandard.ZstdError as e:
        raise IntegrityError(f"blob {sha256}: stored bytes do not decompress ({e})") from None
    if len(raw) != size:
        raise IntegrityError(f"blob {sha256}: decompressed to {len(raw)} bytes, recorded size is {size}")
    got = sha256_hex(raw)
    if got != sha256:
        raise IntegrityError(f"blob {sha256}: content hashes to {got}; the stored blob is corrupt")
    return raw

"""Relocatable object -> HSACO with ld.lld.

    obj bytes --(tmpdir/k.o)--> ld.lld LLD_FLAGS (-shared --no-undefined, options.py) k.o -o k.hsaco --> HSACO bytes

ld.lld adds no build ID and no timestamp unless asked, and records only its own
version in .comment, so the same object gives the same HSACO (tested). The
temporary file names do not reach the output (an input file name would only
appear in a STT_FILE symbol, which LLVM does not emit for these modules).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rocke_aot.aot.compiler._tool import run_tool
from rocke_aot.aot.compiler.lld import find_lld
from rocke_aot.aot.compiler.options import LLD_FLAGS


def link_hsaco(obj: bytes, *, timeout: float = 60.0, lld: str | None = None) -> bytes:
    lld = lld or find_lld()
    with tempfile.TemporaryDirectory(prefix="rocke-link-") as tmp:
        src, out = Path(tmp) / "k.o", Path(tmp) / "k.hsaco"
        src.write_bytes(obj)
        run_tool("ld.lld", [lld, *LLD_FLAGS, str(src), "-o", str(out)], timeout=timeout)
        return out.read_bytes()

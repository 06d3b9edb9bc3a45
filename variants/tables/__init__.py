"""The per-family variant tables, by family name (see variants/table.py for the contract).

    TABLES = {"gemm": GEMM, "conv_direct_fwd": CONV_DIRECT_FWD, "conv_dgrad_patch": CONV_DGRAD_PATCH}

A new family adds one module here and one line below; its lane_decisions must name
every lane of the registry (tests/test_variants.py checks it).
"""

from __future__ import annotations

from rocke_aot.variants.tables.conv import CONV_DGRAD_PATCH, CONV_DIRECT_FWD
from rocke_aot.variants.tables.gemm import GEMM

TABLES = {t.family: t for t in (GEMM, CONV_DIRECT_FWD, CONV_DGRAD_PATCH)}

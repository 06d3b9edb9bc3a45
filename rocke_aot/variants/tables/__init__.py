"""The per-family variant tables (see variants/table.py for the contract).

    gemm.py   GEMM                              conv.py   CONV_DIRECT_FWD, CONV_DGRAD_PATCH

Each table is registered once, in its family's entry of variants/families.py; its
lane_decisions must name every lane of the registry (tests/test_variants.py checks it).
"""

"""The gemm family's declaration: what the ``rocke_aot.families`` entry point ``gemm`` names.

    FAMILY = Family("gemm", GemmSpec, GemmProblem, GEMM table, GEMM model, reference=REFERENCE,
                    operation="matmul")

GemmProblem (variants/problems.py) is the matmul operation's problem, shared with triton_matmul
(a select ranks the two families' candidates together) and built by the torch layer's linear
dispatch; the spec, table, model and reference (what a gemm computes, for ``bench --run-from-cache``
to verify against: reference.py) are this folder's.
"""

from __future__ import annotations

from rocke_aot.families.gemm.model import GEMM as MODEL
from rocke_aot.families.gemm.reference import REFERENCE
from rocke_aot.families.gemm.spec import GemmSpec
from rocke_aot.families.gemm.table import GEMM as TABLE
from rocke_aot.variants.families import Family
from rocke_aot.variants.problems import GemmProblem

FAMILY = Family("gemm", GemmSpec, GemmProblem, TABLE, MODEL,
                "C = A x B, row-major; mfma / wmma / mma (sm_90) / fma paths", reference=REFERENCE,
                operation="matmul")

__all__ = ["FAMILY", "MODEL", "TABLE"]

"""The conv_dgrad_patch family's declaration: what the ``rocke_aot.families`` entry point
``conv_dgrad_patch`` names.

    FAMILY = Family("conv_dgrad_patch", ConvDgradPatchSpec, PatchDgradProblem, TABLE, MODEL, reference=REFERENCE)

PatchDgradProblem (variants/problems.py) is the patch embedding's input gradient, built by the
torch layer's dispatch; the spec, table, model and reference (reference.py: what it computes, for
``bench --run-from-cache`` to verify against) are this folder's.
"""

from __future__ import annotations

from rocke_aot.families.conv_dgrad_patch.model import MODEL
from rocke_aot.families.conv_dgrad_patch.reference import REFERENCE
from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
from rocke_aot.families.conv_dgrad_patch.table import TABLE
from rocke_aot.variants.families import Family
from rocke_aot.variants.problems import PatchDgradProblem

FAMILY = Family("conv_dgrad_patch", ConvDgradPatchSpec, PatchDgradProblem, TABLE, MODEL,
                "dX of a patch embedding: one GEMM dY x W[K, P*P*C] + pixel shuffle, border zeroed", reference=REFERENCE)

__all__ = ["FAMILY", "MODEL", "TABLE"]

"""The conv_direct_fwd family's declaration: what the ``rocke_aot.families`` entry point
``conv_direct_fwd`` names.

    FAMILY = Family("conv_direct_fwd", ConvDirectFwdSpec, ConvProblem, TABLE, MODEL, reference=REFERENCE)

ConvProblem (variants/problems.py) is the conv2d operation's problem, built by the torch layer's
conv dispatch; the spec, table, model and reference (reference.py: what it computes, for
``bench --run-from-cache`` to verify against) are this folder's.
"""

from __future__ import annotations

from rocke_aot.families.conv_direct_fwd.model import MODEL
from rocke_aot.families.conv_direct_fwd.reference import REFERENCE
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.families.conv_direct_fwd.table import TABLE
from rocke_aot.variants.families import Family
from rocke_aot.variants.problems import ConvProblem

FAMILY = Family("conv_direct_fwd", ConvDirectFwdSpec, ConvProblem, TABLE, MODEL,
                "NHWC forward convolution, baked filter/stride/padding/dilation/channels", reference=REFERENCE)

__all__ = ["FAMILY", "MODEL", "TABLE"]

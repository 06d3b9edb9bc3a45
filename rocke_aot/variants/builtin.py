"""The built-in kernel families, installed by name (variants/families.py is the registry).

rocke_aot.variants imports this module, so any use of the variants layer has them; each
family's lowerer registers itself from aot/families/ against the same name. They go through
the registry's one install path (``install(family, BUILTIN)``: the checks a plugin's family
gets, less the grid enumeration the tests do for these); a plugin's families come through the
``rocke_aot.families`` entry points into the same function (docs/plugins.md).

The families that already live in a folder of their own (rocke_aot/families/<name>/: gemm,
attention) are declared through rocke-aot's own entry points instead, like a plugin; the conv
families are installed here until they move too.
"""

from __future__ import annotations

from rocke_aot.variants import models
from rocke_aot.variants.conv import ConvDgradPatchSpec, ConvDirectFwdSpec
from rocke_aot.variants.families import BUILTIN, Family, install
from rocke_aot.variants.problems import ConvProblem, PatchDgradProblem
from rocke_aot.variants.tables.conv import CONV_DGRAD_PATCH, CONV_DIRECT_FWD

CONV_DIRECT_FWD_FAMILY = install(Family(
    "conv_direct_fwd", ConvDirectFwdSpec, ConvProblem, CONV_DIRECT_FWD, models.CONV_DIRECT_FWD,
    "NHWC forward convolution, baked filter/stride/padding/dilation/channels"), BUILTIN)
CONV_DGRAD_PATCH_FAMILY = install(Family(
    "conv_dgrad_patch", ConvDgradPatchSpec, PatchDgradProblem, CONV_DGRAD_PATCH, models.CONV_DGRAD_PATCH,
    "dX of a patch embedding: one GEMM dY x W[K, P*P*C] + pixel shuffle, border zeroed"), BUILTIN)

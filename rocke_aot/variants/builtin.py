"""The built-in kernel families, installed by name (variants/families.py is the registry).

rocke_aot.variants imports this module, so any use of the variants layer has them; each
family's lowerer registers itself from aot/families/ against the same name. They go through
the registry's one install path (``install(family, BUILTIN)``: the checks a plugin's family
gets, less the grid enumeration the tests do for these); a plugin's families come through the
``rocke_aot.families`` entry points into the same function (docs/plugins.md).
"""

from __future__ import annotations

from rocke_aot.variants import models
from rocke_aot.variants.conv import ConvDgradPatchSpec, ConvDirectFwdSpec
from rocke_aot.variants.families import BUILTIN, Family, install
from rocke_aot.variants.gemm import GemmSpec
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem
from rocke_aot.variants.tables.conv import CONV_DGRAD_PATCH, CONV_DIRECT_FWD
from rocke_aot.variants.tables.gemm import GEMM

GEMM_FAMILY = install(Family(
    "gemm", GemmSpec, GemmProblem, GEMM, models.GEMM,
    "C = A x B, row-major; mfma / wmma / mma (sm_90) / fma paths", operation="matmul"), BUILTIN)
CONV_DIRECT_FWD_FAMILY = install(Family(
    "conv_direct_fwd", ConvDirectFwdSpec, ConvProblem, CONV_DIRECT_FWD, models.CONV_DIRECT_FWD,
    "NHWC forward convolution, baked filter/stride/padding/dilation/channels"), BUILTIN)
CONV_DGRAD_PATCH_FAMILY = install(Family(
    "conv_dgrad_patch", ConvDgradPatchSpec, PatchDgradProblem, CONV_DGRAD_PATCH, models.CONV_DGRAD_PATCH,
    "dX of a patch embedding: one GEMM dY x W[K, P*P*C] + pixel shuffle, border zeroed"), BUILTIN)

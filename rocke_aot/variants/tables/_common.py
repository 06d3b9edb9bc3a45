"""What every family table shares: the lane decisions and the paths an arch offers.

Lane decisions are per family and name every registered lane on purpose (see
variants/table.py); these helpers only build the common shapes.
"""

from __future__ import annotations

from rocke_aot.lanes import Lane
from rocke_aot.targets import Target
from rocke_aot.variants.table import Serve

# The conv families' llvm24 decision: LLVM 24's profile carries no NVPTX back end.
LLVM24_NO_NVPTX = Serve("the LLVM 24 AMDGPU code generator; its profile has no NVPTX, so sm_90 is refused there")


def matrix_paths(target: Target, lane: Lane) -> tuple[str, ...]:
    """fma everywhere, plus the arch's matrix unit (mfma on gfx9, wmma on gfx1250, mma on sm_90).

    Whether the lane's profile has the intrinsics is decided by table.path_admission,
    which refuses with the reason; this only says what the family implements.
    """
    unit = target.info.matrix_unit
    return ("fma",) if unit is None else (unit, "fma")

"""What every family table shares: the lane decisions and the paths an arch offers.

Lane decisions are per family and name every registered lane on purpose (see
variants/table.py); these helpers only build the common shapes.
"""

from __future__ import annotations

from rocke_aot.lanes import Lane
from rocke_aot.targets import Target


def matrix_paths(target: Target, lane: Lane) -> tuple[str, ...]:
    """fma everywhere, plus the arch's matrix unit (mfma on gfx9, wmma on gfx1250, mma on sm_90).

    Whether the lane's profile has the intrinsics is decided by table.path_admission,
    which refuses with the reason; this only says what the family implements.
    """
    unit = target.info.matrix_unit
    return ("fma",) if unit is None else (unit, "fma")

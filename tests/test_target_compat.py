"""Target-ID compatibility over the full matrix of feature settings (LLVM AMDGPUUsage "Target ID").

The expected values come from the rule as a table written here, not from the code:
per feature, a code object setting "any" (unset) runs on every device setting; "on" runs
only on a device that says on; "off" only on a device that says off. A device ID that
leaves the feature unset says nothing about its mode, so only "any" code is handed to it.
"""

from __future__ import annotations

import itertools

import pytest

from rocke_aot.errors import SpecError
from rocke_aot.targets import Target, compatible, compatible_ids

SETTINGS = ("any", "on", "off")
# (code setting, device setting) -> runs?   The rule, one row per pair.
RULE = {
    ("any", "any"): True, ("any", "on"): True, ("any", "off"): True,
    ("on", "any"): False, ("on", "on"): True, ("on", "off"): False,
    ("off", "any"): False, ("off", "on"): False, ("off", "off"): True,
}


def _tid(processor: str, sramecc: str, xnack: str) -> str:
    parts = [processor]
    for name, s in (("sramecc", sramecc), ("xnack", xnack)):
        if s != "any":
            parts.append(name + ("+" if s == "on" else "-"))
    return ":".join(parts)


MATRIX = list(itertools.product(SETTINGS, SETTINGS, SETTINGS, SETTINGS))  # 81 cases


@pytest.mark.parametrize("code_sram,code_xnack,dev_sram,dev_xnack", MATRIX)
def test_full_feature_matrix_gfx942(code_sram, code_xnack, dev_sram, dev_xnack):
    code = _tid("gfx942", code_sram, code_xnack)
    device = _tid("gfx942", dev_sram, dev_xnack)
    want = RULE[(code_sram, dev_sram)] and RULE[(code_xnack, dev_xnack)]
    assert compatible(code, device) is want
    assert Target.parse(code).compatible_with(device) is want
    # compatible_ids lists exactly the code IDs the rule admits for this device
    assert (Target.parse(code).id in compatible_ids(device)) is want


@pytest.mark.parametrize("code_xnack,dev_xnack", list(itertools.product(SETTINGS, SETTINGS)))
def test_single_feature_processor_gfx1250(code_xnack, dev_xnack):
    code = "gfx1250" + ("" if code_xnack == "any" else ":xnack" + ("+" if code_xnack == "on" else "-"))
    device = "gfx1250" + ("" if dev_xnack == "any" else ":xnack" + ("+" if dev_xnack == "on" else "-"))
    assert compatible(code, device) is RULE[(code_xnack, dev_xnack)]


@pytest.mark.parametrize("code,device", [("gfx90a", "gfx942"), ("gfx942", "gfx950"),
                                         ("gfx942:xnack-", "gfx950:xnack-"), ("gfx950", "gfx942:sramecc+:xnack-")])
def test_another_processor_never(code, device):
    assert compatible(code, device) is False


def test_examples_from_the_issue():
    dev = "gfx942:sramecc+:xnack-"
    assert compatible("gfx942", dev) and compatible("gfx942:xnack-", dev) and compatible(dev, dev)
    assert not compatible("gfx942:xnack+", dev)
    assert sorted(compatible_ids(dev)) == sorted(
        ["gfx942", "gfx942:xnack-", "gfx942:sramecc+", "gfx942:sramecc+:xnack-"])


def test_unknown_feature_is_a_named_error():
    with pytest.raises(SpecError, match="sramecc"):
        compatible("gfx1250:sramecc+", "gfx1250")

"""Runner timing (runner/runtime.py Runtime.time): the warm-up runs until a floor of device
time has passed, not only a count of calls, because a GPU left idle while the host computed
the reference runs its first launches at a lower clock (H200 run 9: the first-timed kernel of
a problem a median 1.04x, up to 1.4x, slower than its identical-code twin).

The reference is a fake device clock: every call advances it by a known number of ms, and the
fake's events read it, so the count of calls each phase makes is known in advance."""

from __future__ import annotations

import math

import pytest

from rocke_aot.runner import runtime as rt_mod
from rocke_aot.runner.runtime import Runtime


class ClockRuntime(Runtime):
    name = "fake-clock"

    def __init__(self, call_ms: float):
        self.now = 0.0
        self.call_ms = call_ms
        self.calls = 0

    def call(self) -> None:
        self.calls += 1
        self.now += self.call_ms

    def _events(self):
        return (lambda: [0.0], lambda ev: ev.__setitem__(0, self.now), lambda a, b: b[0] - a[0])

    # the rest of the driver surface is not used by time()
    def device_name(self): return "fake"
    def load(self, image): raise NotImplementedError
    def function(self, module, name): raise NotImplementedError
    def unload(self, module): raise NotImplementedError
    def alloc(self, nbytes): raise NotImplementedError
    def free(self, ptr): raise NotImplementedError
    def upload(self, ptr, data): raise NotImplementedError
    def download(self, ptr, out): raise NotImplementedError
    def synchronize(self): pass
    def _launch(self, fn, grid, block, params, shared): raise NotImplementedError


@pytest.mark.parametrize("call_ms", [0.015, 0.3, 7.0, 50.0])
def test_warm_up_lasts_the_device_time_floor(call_ms):
    rt = ClockRuntime(call_ms)
    times = rt.time(rt.call, warmup=2, reps=5, warmup_ms=20.0)
    assert times == pytest.approx([call_ms] * 5)
    warm = rt.calls - 5 - 2
    # doubling batches 1, 2, 4, ...: the fewest whole batches whose calls reach 20 ms
    need = math.ceil(20.0 / call_ms)
    batches = math.ceil(math.log2(need + 1))
    assert warm == 2 ** batches - 1
    assert warm * call_ms >= 20.0 and (warm - 2 ** (batches - 1)) * call_ms < 20.0


def test_no_warm_up_means_none_and_a_free_call_still_ends():
    rt = ClockRuntime(0.01)
    rt.time(rt.call, warmup=0, reps=3)
    assert rt.calls == 3
    rt = ClockRuntime(0.0)  # an empty launch: the call cap ends the warm-up
    rt.time(rt.call, warmup=1, reps=1)
    assert rt.calls <= 1 + 2 * rt_mod.MAX_WARMUP_CALLS + 1

"""Runner timing (runner/runtime.py Runtime.time): the warm-up runs until a floor of device
time has passed, not only a count of calls, because a GPU left idle while the host computed
the reference runs its first launches at a lower clock (H200 run 9: the first-timed kernel of
a problem a median 1.04x, up to 1.4x, slower than its identical-code twin).

The reference is a fake device clock: every call advances it by a known number of ms, and the
fake's events read it, so the count of calls each phase makes is known in advance."""

from __future__ import annotations

import math
import statistics

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
    def _launch(self, fn, grid, block, params, shared, stream=0): raise NotImplementedError


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


class ColdStartRuntime(ClockRuntime):
    """A device whose first call after it sat idle (the host synchronized, then did its own
    work) costs ``cold_ms`` more: what the H200 runs 9 and 12 showed for the first-timed
    candidate of a problem."""

    def __init__(self, call_ms: float, cold_ms: float):
        super().__init__(call_ms)
        self.cold_ms, self.idle, self.log = cold_ms, True, []

    def caller(self, name: str):
        def call() -> None:
            self.log.append(name)
            self.call()
            if self.idle:
                self.now += self.cold_ms
                self.idle = False
        return call

    def synchronize(self):
        self.idle = True


def test_interleaved_rounds_time_every_candidate_in_the_same_state():
    rt = ColdStartRuntime(call_ms=0.02, cold_ms=0.01)
    names = ["a", "b", "c"]
    times = rt.time_many([rt.caller(n) for n in names], warmup=2, reps=4, warmup_ms=1.0)
    # identical kernels measure identically: the cold start fell in the untimed warm-up
    assert times == [pytest.approx([0.02] * 4)] * 3
    timed = rt.log[-12:]
    assert timed == ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"]
    # warm-up: 2 calls of each, then whole rounds (1, 2, 4, ... of them) until 1 ms has passed
    warm_rounds = (len(rt.log) - 12 - 6) // 3
    assert warm_rounds * 3 * 0.02 >= 1.0 and (len(rt.log) - 12 - 6) % 3 == 0


class DriftRuntime(ClockRuntime):
    """A device that slows down steadily (a clock drifting down as the chip heats)."""

    def call(self) -> None:
        self.calls += 1
        self.now += self.call_ms * (1 + 0.01 * self.calls)


def test_alternating_rounds_spread_drift_over_every_candidate():
    rt = DriftRuntime(call_ms=1.0)
    times = rt.time_many([rt.call] * 4, warmup=1, reps=6, warmup_ms=0.5)
    means = [sum(t) / len(t) for t in times]
    assert means == pytest.approx([means[0]] * 4, rel=1e-12)
    # the reference: timed one after another, the last candidate pays the drift
    rt = DriftRuntime(call_ms=1.0)
    seq = [rt.time(rt.call, warmup=1, reps=6, warmup_ms=0.5) for _ in range(4)]
    assert [sum(t) for t in seq] == sorted(sum(t) for t in seq) and sum(seq[3]) > sum(seq[0]) * 1.1


class StreamSim:
    """One in-order stream and a host that pays for every API call: the host clock advances by
    ``host_us`` per call (an event record, a launch); the device runs each entry when it is
    enqueued and the entry before it is done, a kernel for its duration, a hold for its ms, and
    an event takes the device's time when the device reaches it. The reference: the kernels'
    own durations, which a timing that never waits for the host must return exactly."""

    def __init__(self, host_us: float):
        self.host = 0.0  # seconds
        self.device = 0.0
        self.step = host_us * 1e-6

    def _enqueue(self, seconds: float) -> float:
        self.host += self.step
        self.device = max(self.device, self.host) + seconds
        return self.device

    def kernel(self, us: float):
        return lambda: self._enqueue(us * 1e-6)

    def events(self):
        return (lambda: [0.0], lambda ev: ev.__setitem__(0, self._enqueue(0.0)),
                lambda a, b: (b[0] - a[0]) * 1e3)

    def hold(self, ms: float) -> None:
        self._enqueue(ms * 1e-3)


@pytest.mark.parametrize("host_us", [5.0, 20.0])
def test_a_hold_keeps_short_kernels_from_measuring_the_host(host_us):
    kernel_us = [3.0, 8.0, 9.5, 40.0, 120.0, 6.0] * 30  # 180 calls: two hold groups a round
    sim = StreamSim(host_us)
    calls = [sim.kernel(us) for us in kernel_us]
    held = rt_mod.interleaved_times(calls, sim.events(), lambda: None, warmup=1, reps=3, warmup_ms=1.0,
                                    hold=sim.hold, clock=lambda: sim.host)
    assert [t for ts in held for t in ts] == pytest.approx([us * 1e-3 for us in kernel_us for _ in range(3)])


def test_without_a_hold_a_short_kernel_measures_the_host():
    """What the hold is for: short kernels (a small conv problem's candidates) behind a host that
    takes 20 us an API call measure ~the host's time per call, not their own."""
    kernel_us = [3.0, 8.0, 9.5, 6.0] * 10
    sim = StreamSim(20.0)
    calls = [sim.kernel(us) for us in kernel_us]
    bare = rt_mod.interleaved_times(calls, sim.events(), lambda: None, warmup=1, reps=3, warmup_ms=1.0)
    assert all(statistics.median(ts) > 2 * us * 1e-3 for ts, us in zip(bare, kernel_us))

"""Chunk planning around the 2 GiB addressing limit."""

from __future__ import annotations

import itertools

import pytest

from rocke_aot.errors import SpecError
from rocke_aot.runner.chunk import Chunk, plan_chunks

LIMIT = 2**31 - 1


def _check(chunks, extent, unit_bytes, limit):
    # Reference properties, stated independently of the planner: the chunks tile [0, extent)
    # in order without gaps or overlap, every slice fits, all but the last share one count.
    assert sum(c.count for c in chunks) == extent
    pos = 0
    for c in chunks:
        assert c.start == pos and c.count > 0
        pos += c.count
        for ub in unit_bytes.values():
            assert c.count * ub <= limit
    assert len({c.count for c in chunks[:-1]}) <= 1
    if len(chunks) > 1:
        assert chunks[-1].count <= chunks[0].count


@pytest.mark.parametrize("extent, unit", [
    (1, 1), (8, 2**28), (9, 2**28), (16, 2**28 - 1), (3, LIMIT), (5, LIMIT // 2),
    (5, LIMIT // 2 + 1), (1000, 3 * 2**21 + 7), (2**20, 2049),
])
def test_chunks_tile_the_axis_and_fit(extent, unit):
    chunks = plan_chunks(extent, {"x": unit, "y": unit // 2 + 1}, LIMIT)
    _check(chunks, extent, {"x": unit, "y": unit // 2 + 1}, LIMIT)


def test_sizes_just_around_2_gib():
    # 8 images of exactly 256 MiB = 2 GiB in all: one byte over the limit, so two launches
    unit = 2**28
    assert plan_chunks(8, {"x": unit}) == (Chunk(0, 7), Chunk(7, 1))
    # 2 GiB - 1 byte in total fits in one launch
    assert plan_chunks(1, {"x": LIMIT}) == (Chunk(0, 1),)
    # 1 GiB units: two would be 2 GiB, one byte over -> one unit per launch
    assert plan_chunks(3, {"x": 2**30}) == (Chunk(0, 1), Chunk(1, 1), Chunk(2, 1))
    # 5 units of 0.5 GiB - 1: four are 2 GiB - 4 bytes and fit; the fifth runs alone
    assert plan_chunks(5, {"x": 2**29 - 1}) == (Chunk(0, 4), Chunk(4, 1))
    # a small tensor never limits the count
    assert plan_chunks(4, {"x": 2**29, "w": 1}) == (Chunk(0, 3), Chunk(3, 1))
    # byte offsets of each slice
    assert [c.byte_offset(2**28) for c in plan_chunks(8, {"x": 2**28})] == [0, 7 * 2**28]


def test_a_unit_over_the_limit_is_refused_with_the_tensor_named():
    with pytest.raises(SpecError, match="'x'.*cannot be split"):
        plan_chunks(2, {"x": LIMIT + 1})


@pytest.mark.parametrize("extent", [-1, 1.5, "3", True])
def test_bad_extent(extent):
    with pytest.raises(SpecError):
        plan_chunks(extent, {"x": 1})


def test_empty_extent_plans_nothing():
    assert plan_chunks(0, {"x": 10}) == ()


def test_exhaustive_small():
    for extent, ub, limit in itertools.product(range(1, 20), range(1, 9), range(8, 30)):
        _check(plan_chunks(extent, {"a": ub}, limit), extent, {"a": ub}, limit)


# The runtimes' named "unavailable" answers (no binding, no driver, no device) are checked through
# fake drivers, so they hold on a GPU machine too: tests/test_runtime_fake_driver.py; the real
# runtimes: tests/test_runtime_gpu.py (gpu).

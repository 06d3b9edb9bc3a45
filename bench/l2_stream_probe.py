"""The L2 -> SM bandwidth of the gemm staging's own copies on an NVIDIA GPU: a throughput
microbenchmark for the l2_bytes_per_clk fact of variants/hw_facts/sm_90.json.

bench/l2_probe.py measures the loaded latency with one load a warp in flight; its highest rate
(43.5 bytes per SM per clock) is bytes in flight over that latency (Little's law), a lower bound
of the L2's limit, and its warps read the same address sequence, so an SM's L1 may have merged
their requests. This probe keeps the L2 busy the way the sm_90 asynchronous gemm does and no
L1 can help:

    every thread, ITERS times: one 16-byte cp.async.cg (L2 only, no L1 allocation) into its own
    slot of a STAGES-deep ring in shared memory; commit; wait until at most STAGES - 1 groups
    are pending (so STAGES - 1 copies a thread stay in flight, as the gemm's pipeline stages)
    the grid reads one contiguous stripe an iteration (block b: bytes b x 4096 .. of it, its 256
    threads 16 bytes each, 32 whole 128-byte lines), the next iteration the next stripe: every
    line is read once a pass, by one SM, wrapping in FOOTPRINT bytes
        │
        ▼
    per (footprint, stages, blocks per SM): median of 5 launches (CUDA events) after one warm-up
    launch (which makes an L2-resident footprint resident), bytes = blocks x 256 x 16 x ITERS,
    GB/s and bytes per SM per clock at the facts file's clock (1980 MHz)

The HBM rows (1 GiB footprint) check the method against the data sheet's 4.8 TB/s; the L2 rows
(8 and 24 MiB, under the H200's 50 MiB L2) rise with bytes in flight until the L2 side limits:
their plateau is the fact.

Run on the H200 (torch and cuda-bindings are on that machine; nothing of the project is needed):
    python3 bench/l2_stream_probe.py --json $OUT/l2-stream.json      # well under a minute
"""

from __future__ import annotations

import argparse
import json

THREADS = 256
SLOT = THREADS * 16  # bytes a block copies an iteration
CLOCK_HZ = 1.98e9  # the facts file's clock (variants/hw_facts/sm_90.json clock_mhz)

PTX = r"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry stream(.param .u64 p_base, .param .u64 p_mask, .param .u32 p_iters, .param .u64 p_sink)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<24>;
    .reg .b64 %rd<24>;
    .shared .align 16 .b8 ring[{ring}];

    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %nctaid.x;
    ld.param.u64 %rd1, [p_base];
    ld.param.u64 %rd2, [p_mask];
    ld.param.u32 %r4, [p_iters];
    mul.wide.u32 %rd3, %r2, {slot};         // this block's first byte of a stripe
    mul.wide.u32 %rd4, %r1, 16;
    add.u64 %rd3, %rd3, %rd4;               // + this thread's 16 bytes
    mul.wide.u32 %rd5, %r3, {slot};         // a stripe: the grid's bytes an iteration
    mov.u32 %r5, ring;
    shl.b32 %r6, %r1, 4;
    add.u32 %r5, %r5, %r6;                  // this thread's slot in stage 0
    mov.u32 %r7, 0;                         // i
LOOP:
    and.b64 %rd6, %rd3, %rd2;
    add.u64 %rd7, %rd1, %rd6;
    and.b32 %r8, %r7, {stage_mask};
    mad.lo.u32 %r9, %r8, {slot}, %r5;
    cp.async.cg.shared.global [%r9], [%rd7], 16;
    cp.async.commit_group;
    cp.async.wait_group {pending};
    add.u64 %rd3, %rd3, %rd5;
    add.u32 %r7, %r7, 1;
    setp.lt.u32 %p1, %r7, %r4;
    @%p1 bra LOOP;
    cp.async.wait_all;
    ld.shared.u32 %r10, [%r5];
    ld.param.u64 %rd8, [p_sink];
    cvta.to.global.u64 %rd8, %rd8;
    mad.lo.u32 %r11, %r2, {threads}, %r1;
    mul.wide.u32 %rd9, %r11, 4;
    add.u64 %rd9, %rd8, %rd9;
    st.global.u32 [%rd9], %r10;
    ret;
}}
"""


def ptx(stages: int) -> str:
    """The probe's PTX for a ring of ``stages`` slots (a power of two)."""
    assert stages & (stages - 1) == 0 and stages >= 2
    return PTX.format(ring=stages * SLOT, slot=SLOT, stage_mask=stages - 1, pending=stages - 1, threads=THREADS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2048)
    ap.add_argument("--stages", type=int, nargs="*", default=[2, 4, 8])
    ap.add_argument("--blocks-per-sm", type=int, nargs="*", default=[1, 2, 4])
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import numpy as np
    import torch
    from _ptx_probe import Device

    d = Device()
    sms = d.sms
    fns = {s: d.function(ptx(s), "stream") for s in a.stages}
    rows = []
    for footprint, where in ((8 << 20, "L2"), (24 << 20, "L2"), (1 << 30, "HBM")):
        buf = torch.randint(0, 2 ** 31 - 1, (footprint // 4,), dtype=torch.int32, device="cuda")
        for stages in a.stages:
            for bps in a.blocks_per_sm:
                blocks = bps * sms
                sink = torch.zeros(blocks * THREADS, dtype=torch.int32, device="cuda")
                launch = d.launcher(fns[stages], blocks, THREADS, [
                    np.array([buf.data_ptr()], dtype=np.uint64), np.array([footprint - 1], dtype=np.uint64),
                    np.array([a.iters], dtype=np.uint32), np.array([sink.data_ptr()], dtype=np.uint64)])
                ms, times = d.time(launch)
                nbytes = blocks * SLOT * a.iters
                rows.append({"where": where, "footprint": footprint, "stages": stages, "blocks_per_sm": bps,
                             "warps_per_sm": bps * THREADS // 32, "iters": a.iters, "ms": ms, "times_ms": times,
                             "bytes": nbytes, "gbps": nbytes / (ms * 1e-3) / 1e9,
                             "bytes_per_sm_per_clk_at_1980": nbytes / (ms * 1e-3) / CLOCK_HZ / sms,
                             "bytes_in_flight_per_sm": bps * THREADS * 16 * (stages - 1)})
                del sink
        del buf
        torch.cuda.empty_cache()
    props = d.props
    doc = {"device": props.name, "sms": sms, "threads_per_block": THREADS, "rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
    print(f"{props.name}, {sms} SMs; {a.iters} 16-byte cp.async.cg a thread, {THREADS} threads a block")
    print(f"{'where':<5} {'MiB':>5} {'stages':>6} {'warps/SM':>8} {'in flight':>9} {'ms':>8} {'GB/s':>7} {'B/SM/clk':>8}")
    for r in rows:
        print(f"{r['where']:<5} {r['footprint'] >> 20:>5} {r['stages']:>6} {r['warps_per_sm']:>8} "
              f"{r['bytes_in_flight_per_sm']:>9} {r['ms']:>8.3f} {r['gbps']:>7.0f} {r['bytes_per_sm_per_clk_at_1980']:>8.2f}")


if __name__ == "__main__":
    main()

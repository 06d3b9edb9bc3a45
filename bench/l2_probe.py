"""What the staging loads of the gemm kernels get from the memory system on an NVIDIA GPU: a
microbenchmark of the facts variants/hw_facts/sm_90.json takes from papers (global latency, L2
bytes per SM per clock) and of the line count variants/counts.py charges (global_wavefronts).

    every thread: ITERS loads of 8 bytes (ld.global.v2.u32: one lane's share of a 4 x f16 vector,
    as the gemm staging moves it), one at a time (the next address depends on the value loaded,
    through a mask the compiler cannot see is zero: the staging loop's load -> store -> load)
    a warp's 32 lanes read rows of SEG bytes (64: a block_k 32 f16 tile row; 128: block_k 64),
    rows 2048 bytes apart (K = 1024 f16), every load a new set of rows, wrapping in FOOTPRINT
    bytes (8 MiB: L2-resident; 4 GiB: from HBM)
    blocks of 128 threads (4 warps), BLOCKS_PER_SM x SMs of them, all resident at once
        │
        ▼
    per (footprint, SEG, warps per SM): median time of 5 launches (CUDA events), bytes moved,
    GB/s, bytes per SM per clock at the clock the facts file uses (1980 MHz) and at the SM cycle
    count the kernel itself reads (%clock64, first warp of every block): cycles per load of one
    warp = its loaded latency

What it proves that the replay (bench/replay_models.py) cannot:
- the loaded latency from 4 warps per SM (one block) up (the facts file's global_latency was an
  H800 paper's 480 cycles until this probe's 2026-12-03 run) and how it grows with warps in
  flight (Little's law: bytes in flight / latency)
- the L2 -> SM bandwidth per SM these loads reach (the facts file's 21 bytes per SM per clock was
  a microbenchmark of fully coalesced 16-byte loads on an H100 PCIe until the same run)
- whether 64-byte row pieces cost more per byte than 128-byte ones at the same warps per SM, as
  the global_wavefronts count says (4 lines per warp load against 2)

Every warp's first byte is warp x ITERS x rows per load x 2048, which wraps in the footprint: in
the 8 MiB one every warp reads the same address sequence with 64-byte pieces (one of two with
128), nearly in step, so at --phase-loads 0, as in the 2026-12-03 run (bench/results/bench-raw/
h200-l2-probe), an SM's L1 may merge its warps' requests for one line and the L2 serve fewer bytes
than counted; in the 4 GiB one there are 512 (1024) sequences, so from 8 (16) warps per SM up several
warps share one and the L2 serves some of the "HBM" rows (at 64 warps per SM they moved 5.4-5.7
TB/s, over the 4.8 TB/s of the data sheet). --phase-loads N starts warp w N x w loads further
along its sequence, so warps running together read different lines.

Run on the H200 (torch and cuda-bindings are on that machine; nothing of the project is needed):
    python3 bench/l2_probe.py --json $OUT/l2-probe.json        # about a minute
    python3 bench/l2_probe.py --phase-loads 7 --json $OUT/l2-probe-phase7.json   # staggered warps
"""

from __future__ import annotations

import argparse
import json

PTX = r"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry probe(.param .u64 p_base, .param .u32 p_iters, .param .u32 p_lanes_log2,
                      .param .u64 p_mask, .param .u32 p_zero, .param .u64 p_out, .param .u64 p_sink,
                      .param .u64 p_phase)
{
    .reg .pred %p<2>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<40>;

    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;          // global thread
    shr.u32 %r5, %r4, 5;                    // global warp
    and.b32 %r6, %r1, 31;                   // lane
    ld.param.u32 %r7, [p_lanes_log2];       // lanes per row = 2^k (8: 64-byte rows, 16: 128)
    shr.u32 %r8, %r6, %r7;                  // this lane's row within one warp load
    mov.u32 %r9, 1;
    shl.b32 %r9, %r9, %r7;
    sub.u32 %r9, %r9, 1;
    and.b32 %r10, %r6, %r9;
    shl.b32 %r10, %r10, 3;                  // byte within the row (8 bytes a lane)
    mov.u32 %r11, 32;
    shr.u32 %r11, %r11, %r7;                // rows per warp load
    ld.param.u32 %r12, [p_iters];
    mul.lo.u32 %r13, %r5, %r12;
    cvt.u64.u32 %rd1, %r13;
    cvt.u64.u32 %rd2, %r11;
    mul.lo.u64 %rd3, %rd1, %rd2;
    cvt.u64.u32 %rd4, %r8;
    add.u64 %rd3, %rd3, %rd4;               // row of the first load
    shl.b64 %rd3, %rd3, 11;                 // x 2048 bytes
    cvt.u64.u32 %rd5, %r10;
    add.u64 %rd3, %rd3, %rd5;               // byte offset of the first load
    ld.param.u64 %rd30, [p_phase];
    cvt.u64.u32 %rd31, %r5;
    mad.lo.u64 %rd3, %rd31, %rd30, %rd3;    // + warp x phase (0: see --phase-loads)
    mul.wide.u32 %rd6, %r11, 2048;          // advance per load
    ld.param.u64 %rd7, [p_base];
    cvta.to.global.u64 %rd7, %rd7;
    ld.param.u64 %rd8, [p_mask];
    ld.param.u32 %r14, [p_zero];
    mov.u32 %r15, 0;                        // i
    mov.u32 %r16, 0;                        // xor of every value (kept live)
    mov.u64 %rd9, 0;                        // the dependency (always 0)
    mov.u64 %rd20, %clock64;
LOOP:
    add.u64 %rd10, %rd3, %rd9;
    and.b64 %rd10, %rd10, %rd8;
    add.u64 %rd11, %rd7, %rd10;
    ld.global.v2.u32 {%r17, %r18}, [%rd11];
    xor.b32 %r16, %r16, %r17;
    xor.b32 %r16, %r16, %r18;
    and.b32 %r19, %r17, %r14;               // 0, unknown to the compiler: the next load waits
    cvt.u64.u32 %rd9, %r19;
    add.u64 %rd3, %rd3, %rd6;
    add.u32 %r15, %r15, 1;
    setp.lt.u32 %p1, %r15, %r12;
    @%p1 bra LOOP;
    mov.u64 %rd21, %clock64;
    ld.param.u64 %rd12, [p_sink];
    cvta.to.global.u64 %rd12, %rd12;
    mul.wide.u32 %rd13, %r4, 4;
    add.u64 %rd13, %rd12, %rd13;
    st.global.u32 [%rd13], %r16;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    sub.u64 %rd22, %rd21, %rd20;
    ld.param.u64 %rd14, [p_out];
    cvta.to.global.u64 %rd14, %rd14;
    mul.wide.u32 %rd15, %r2, 8;
    add.u64 %rd15, %rd14, %rd15;
    st.global.u64 [%rd15], %rd22;
DONE:
    ret;
}
"""

THREADS = 128
CLOCK_HZ = 1.98e9  # the facts file's clock (variants/hw_facts/sm_90.json clock_mhz)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=1024)
    ap.add_argument("--blocks-per-sm", type=int, nargs="*", default=[1, 2, 4, 8, 16])
    ap.add_argument("--json", default=None)
    ap.add_argument("--phase-loads", type=int, default=0,
                    help="warp w starts N x w loads along its sequence (0: every warp the same one)")
    a = ap.parse_args()

    import numpy as np
    import torch
    from _ptx_probe import Device

    d = Device()
    props, sms = d.props, d.sms
    fn = d.function(PTX, "probe")

    rows = []
    for footprint, where in ((8 << 20, "L2"), (4 << 30, "HBM")):
        buf = torch.randint(0, 2 ** 31 - 1, (footprint // 4,), dtype=torch.int32, device="cuda")
        for seg in (64, 128):
            lanes_log2 = {64: 3, 128: 4}[seg]
            for bps in a.blocks_per_sm:
                blocks = bps * sms
                out = torch.zeros(blocks, dtype=torch.int64, device="cuda")
                sink = torch.zeros(blocks * THREADS, dtype=torch.int32, device="cuda")
                launch = d.launcher(fn, blocks, THREADS, [
                    np.array([buf.data_ptr()], dtype=np.uint64), np.array([a.iters], dtype=np.uint32),
                    np.array([lanes_log2], dtype=np.uint32), np.array([footprint - 1], dtype=np.uint64),
                    np.array([0], dtype=np.uint32), np.array([out.data_ptr()], dtype=np.uint64),
                    np.array([sink.data_ptr()], dtype=np.uint64),
                    np.array([a.phase_loads * (256 // seg) * 2048], dtype=np.uint64)])
                ms, times = d.time(launch)
                cycles = out.cpu().numpy()
                nbytes = blocks * THREADS * a.iters * 8
                row = {"where": where, "footprint": footprint, "seg_bytes": seg, "warps_per_sm": bps * THREADS // 32,
                       "blocks": blocks, "iters": a.iters, "ms": ms, "times_ms": times, "bytes": nbytes,
                       "gbps": nbytes / (ms * 1e-3) / 1e9,
                       "bytes_per_sm_per_clk_at_1980": nbytes / (ms * 1e-3) / CLOCK_HZ / sms,
                       "cycles_per_load_median": float(np.median(cycles)) / a.iters,
                       "bytes_in_flight_per_sm": bps * THREADS * 8,
                       "lines_per_warp_load": 256 // seg, "phase_loads": a.phase_loads}
                rows.append(row)
                del out, sink
        del buf
        torch.cuda.empty_cache()
    doc = {"device": props.name, "sms": sms, "threads_per_block": THREADS, "phase_loads": a.phase_loads, "rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
    print(f"{props.name}, {sms} SMs; {a.iters} serial 8-byte loads a thread, 4 warps a block, "
          f"phase {a.phase_loads} loads a warp")
    print(f"{'where':<5} {'seg':>4} {'warps/SM':>8} {'in flight':>9} {'ms':>8} {'GB/s':>7} {'B/SM/clk':>8} "
          f"{'cyc/load':>8}")
    for r in rows:
        print(f"{r['where']:<5} {r['seg_bytes']:>4} {r['warps_per_sm']:>8} {r['bytes_in_flight_per_sm']:>9} "
              f"{r['ms']:>8.3f} {r['gbps']:>7.0f} {r['bytes_per_sm_per_clk_at_1980']:>8.2f} "
              f"{r['cycles_per_load_median']:>8.0f}")


if __name__ == "__main__":
    main()

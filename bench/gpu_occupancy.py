"""Residency check on a real NVIDIA device: for every sm_90 artifact of a cache, the work-groups
per SM that rocke_aot.candidates.groups_per_cu computes from the parsed cubin resources
(registers, static shared memory) against the driver's own cuOccupancyMaxActiveBlocksPerMultiprocessor,
and the parsed register count against cuFuncGetAttribute(NUM_REGS). Run by scripts/gpu-bench.sh.

    python bench/gpu_occupancy.py --cache sqlite:///... [--out occupancy.json]
"""

from __future__ import annotations

import argparse
import json

from rocke_aot.arch import arch_info
from rocke_aot.cache.keys import thaw
from rocke_aot.cache.store import Store
from rocke_aot.candidates import groups_per_cu
from rocke_aot.launch import LaunchContract
from rocke_aot.runner.runtime import CudaRuntime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    rt = CudaRuntime()
    cu = rt.cu
    info = arch_info("sm_90")
    store = Store.open(a.cache, create=False, readonly=True)
    rows = []
    for fam in ("gemm", "conv_direct_fwd", "conv_dgrad_patch"):
        for c in store.candidates(fam, "sm_90"):
            art = store.get(c.key)
            meta = thaw(art.metadata)
            contract = LaunchContract.from_dict(meta["launch"])
            threads = 1
            for x in contract.block:
                threads *= int(x)
            mod = rt.load(art.code_object)
            fn = rt.function(mod, contract.kernel)
            drv = rt.c(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, threads, 0), "cuOccupancy")
            regs = rt.c(cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, fn), "NUM_REGS")
            smem = rt.c(cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn), "SMEM")
            local = rt.c(cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn), "LOCAL")
            rt.unload(mod)
            r = c.resources
            ours = r.groups_per_cu if r.groups_per_cu is not None else groups_per_cu(
                info, vgprs=r.vgprs, sgprs=r.sgprs, lds_bytes=r.lds_bytes, workgroup_size=threads)
            rows.append({"kernel": contract.kernel, "threads": threads, "regs_parsed": r.vgprs, "regs_driver": int(regs),
                         "smem_parsed": r.lds_bytes, "smem_driver": int(smem), "local_parsed": r.private_segment_bytes,
                         "local_driver": int(local), "groups_ours": ours, "groups_driver": int(drv)})
    bad = [x for x in rows if x["groups_ours"] != x["groups_driver"] or x["regs_parsed"] != x["regs_driver"]
           or x["smem_parsed"] != x["smem_driver"] or (x["local_parsed"] or 0) != x["local_driver"]]
    doc = {"device": rt.device_name(), "kernels": len(rows), "mismatches": len(bad), "first_mismatches": bad[:20],
           "rows": rows}
    print(json.dumps({k: v for k, v in doc.items() if k != "rows"}, indent=1))
    if a.out:
        json.dump(doc, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()

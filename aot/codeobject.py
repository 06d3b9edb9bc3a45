"""Code-object validation: an HSACO (or cubin) must be what its arch target ID says.

    bytes --pyelftools--> ELF header ── e_machine EM_AMDGPU (224), OS ABI AMDGPU_HSA,
      │                                 e_flags: EF_AMDGPU_MACH == the processor,
      │                                          xnack / sramecc bits agree with the target ID
      ├── symbols: <kernel> (STT_FUNC) and <kernel>.kd (STT_OBJECT, 64 bytes)
      │        └── .kd bytes -> KernelDescriptor (user SGPR inputs enabled, wave32, LDS, scratch)
      ├── note NT_AMDGPU_METADATA --msgpack--> kernel name, kernarg size and args,
      │        VGPR/SGPR/AGPR counts, LDS, wavefront size, private segment (spills)
      └── arch limits (rocke_aot/arch.py): wave size equal, LDS and registers within the arch
                                           │
                               CodeObjectInfo (frozen; as_dict()) or CodeObjectError

    cubin: EM_CUDA (190), the SM in e_flags, the kernel symbol (a lighter check), and its
           resources: the global .nv.info section's records (u8 format, u8 attribute; format
           0x04 EIFMT_SVAL then u16 size and the value) EIATTR_REGCOUNT (0x2f: u32 symbol
           index, u32 registers per thread) -> vgpr_count and EIATTR_FRAME_SIZE (0x11: symbol,
           bytes of local memory per thread, spills included) -> private_segment_bytes; the
           size of .nv.shared.<kernel> less the system's reserved 1 KB it spans (when a
           .nv.shared.reserved section exists) -> lds_bytes (static shared memory). On an H200
           all three equal the driver's cuFuncGetAttribute NUM_REGS, LOCAL_SIZE_BYTES and
           SHARED_SIZE_BYTES for 832 sm_90 kernels; a truncated record is a CodeObjectError.

    launch_layout(contract, info, ptx=None) -> LaunchContract
        hsaco: every argument's offset/size from the metadata note's .args (value_kind
               global_buffer / by_value must match pointer / scalar), kernarg size from
               .kernarg_segment_size; any disagreement with the lowering is a CodeObjectError
        cubin: the PTX .entry's .param list (count, order, .u64 pointers / .u32 scalars) must
               match the lowering's kernargs, which then stand as the layout

Encodings are from LLVM's AMDGPUUsage (ELF header e_flags for code object v4+,
the kernel descriptor, the code object metadata); pyelftools parses the ELF and
msgpack the metadata note, nothing here walks ELF bytes by hand.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import struct
from dataclasses import asdict, dataclass
from typing import Any

import msgpack
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from rocke_aot.targets import Target
from rocke_aot.errors import CodeObjectError
from rocke_aot.launch import SCALAR_TYPES, LaunchContract

EM_AMDGPU = 224
EM_CUDA = 190
ELFOSABI_AMDGPU_HSA = 64
NT_AMDGPU_METADATA = 32

# AMDGPUUsage "AMDGPU ELF Header e_flags": EF_AMDGPU_MACH (bits 0..7) per processor.
EF_AMDGPU_MACH_MASK = 0x0FF
EF_AMDGPU_MACH = {"gfx90a": 0x03F, "gfx942": 0x04C, "gfx950": 0x04F, "gfx1250": 0x049}
# Code object v4+: a 2-bit setting per feature.
EF_AMDGPU_FEATURE = {"xnack": (0x300, 8), "sramecc": (0xC00, 10)}
_SETTING = {0: "unsupported", 1: "any", 2: "off", 3: "on"}
# EI_ABIVERSION for ELFOSABI_AMDGPU_HSA -> code object version.
_CODE_OBJECT_VERSION = {1: 3, 2: 4, 3: 5, 4: 6}

# AMDGPUUsage "Kernel Descriptor": kernel_code_properties (u16 at byte 56), bit -> input.
_KD_USER_SGPR_BITS = {
    0: "private_segment_buffer",
    1: "dispatch_ptr",
    2: "queue_ptr",
    3: "kernarg_segment_ptr",
    4: "dispatch_id",
    5: "flat_scratch_init",
    6: "private_segment_size",
}
_KD_WAVE32_BIT = 10
_KD_DYNAMIC_STACK_BIT = 11


@dataclass(frozen=True)
class KernelArg:
    name: str
    offset: int
    size: int
    value_kind: str
    address_space: str | None = None


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte kernel descriptor (<kernel>.kd), decoded."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    user_sgpr_inputs: tuple[str, ...]  # enabled user-SGPR inputs, in SGPR order
    user_sgpr_count: int  # COMPUTE_PGM_RSRC2.USER_SGPR_COUNT
    workgroup_ids: tuple[str, ...]  # "x", "y", "z" system SGPRs enabled
    workitem_id_dims: int  # 1..3 (VGPR workitem ids enabled)
    scratch_enabled: bool  # COMPUTE_PGM_RSRC2.ENABLE_PRIVATE_SEGMENT
    wavefront_size32: bool
    uses_dynamic_stack: bool
    kernarg_preload: int  # KERNARG_PRELOAD_SPEC_LENGTH (dwords preloaded into SGPRs)


@dataclass(frozen=True)
class CodeObjectInfo:
    format: str  # "hsaco" | "cubin"
    target: str  # the target ID validated against
    kernel: str
    e_flags: int
    code_object_version: int | None = None
    xnack: str | None = None  # "on" | "off" | "any" | "unsupported"
    sramecc: str | None = None
    metadata_target: str | None = None  # amdhsa.target
    kernarg_size: int | None = None
    kernarg_align: int | None = None
    args: tuple[KernelArg, ...] = ()
    vgpr_count: int | None = None
    sgpr_count: int | None = None
    agpr_count: int | None = None
    vgpr_spill_count: int | None = None
    sgpr_spill_count: int | None = None
    lds_bytes: int | None = None  # group_segment_fixed_size
    private_segment_bytes: int | None = None  # per work-item scratch (spills, stack)
    wavefront_size: int | None = None
    max_flat_workgroup_size: int | None = None
    descriptor: KernelDescriptor | None = None
    comment: tuple[str, ...] = ()  # .comment strings (linker / producer versions)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types (tuples become lists), as stored in artifact metadata."""
        return json.loads(json.dumps(asdict(self)))


# ---------------------------------------------------------------- helpers


def _elf(data: bytes) -> ELFFile:
    if not isinstance(data, (bytes, bytearray)) or len(data) < 64:
        raise CodeObjectError(f"not a code object: {len(data) if data else 0} bytes")
    try:
        elf = ELFFile(io.BytesIO(bytes(data)))
        elf.num_sections()
        return elf
    except (ELFError, struct.error, ValueError, KeyError, IndexError) as e:
        raise CodeObjectError(f"malformed ELF: {e}") from None


def _machine(elf: ELFFile) -> int | str:
    m = elf.header["e_machine"]
    return {"EM_AMDGPU": EM_AMDGPU, "EM_CUDA": EM_CUDA}.get(m, m)


def _raw_ident(elf: ELFFile, field: str) -> int:
    # pyelftools names EI_OSABI 64 after ARM ("ELFOSABI_ARM_AEABI"), so read the raw byte.
    offset = {"EI_OSABI": 7, "EI_ABIVERSION": 8}[field]
    elf.stream.seek(offset)
    return elf.stream.read(1)[0]


def comment_strings(data: bytes) -> tuple[str, ...]:
    """The .comment section's strings (e.g. "Linker: Debian LLD 22.1.8")."""
    return _comment(_elf(data))


def _comment(elf: ELFFile) -> tuple[str, ...]:
    sec = elf.get_section_by_name(".comment")
    if sec is None:
        return ()
    return tuple(s.decode("utf-8", "replace") for s in sec.data().split(b"\0") if s)


def _symbols(elf: ELFFile) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in (".dynsym", ".symtab"):
        sec = elf.get_section_by_name(name)
        if sec is not None:
            for sym in sec.iter_symbols():
                out.setdefault(sym.name, sym)
    return out


def _symbol_bytes(elf: ELFFile, sym) -> bytes:
    shndx = sym["st_shndx"]
    if not isinstance(shndx, int):
        raise CodeObjectError(f"symbol {sym.name} is not defined in a section ({shndx})")
    sec = elf.get_section(shndx)
    start = sym["st_value"] - sec["sh_addr"]
    data = sec.data()
    if start < 0 or start + sym["st_size"] > len(data):
        raise CodeObjectError(f"symbol {sym.name} lies outside its section {sec.name}")
    return data[start:start + sym["st_size"]]


def _metadata(elf: ELFFile) -> dict:
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_NOTE":
            continue
        for note in sec.iter_notes():
            if note["n_name"] == "AMDGPU" and note["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
                desc = note["n_desc"]
                desc = desc if isinstance(desc, bytes) else bytes(desc, "latin-1")
                try:
                    meta = msgpack.unpackb(desc, raw=False, strict_map_key=False)
                except Exception as e:
                    raise CodeObjectError(f"NT_AMDGPU_METADATA is not valid msgpack: {e}") from None
                if not isinstance(meta, dict):
                    raise CodeObjectError("NT_AMDGPU_METADATA is not a map")
                return meta
    raise CodeObjectError("no NT_AMDGPU_METADATA note (not an HSA code object v3+)")


def decode_kernel_descriptor(kd: bytes) -> KernelDescriptor:
    if len(kd) != 64:
        raise CodeObjectError(f"kernel descriptor is {len(kd)} bytes, expected 64")
    group, private, kernarg = struct.unpack_from("<III", kd, 0)
    rsrc2 = struct.unpack_from("<I", kd, 52)[0]
    props, preload = struct.unpack_from("<HH", kd, 56)
    inputs = tuple(name for bit, name in sorted(_KD_USER_SGPR_BITS.items()) if props >> bit & 1)
    return KernelDescriptor(
        group_segment_fixed_size=group,
        private_segment_fixed_size=private,
        kernarg_size=kernarg,
        user_sgpr_inputs=inputs,
        user_sgpr_count=rsrc2 >> 1 & 0x1F,
        workgroup_ids=tuple(axis for i, axis in enumerate("xyz") if rsrc2 >> (7 + i) & 1),
        workitem_id_dims=(rsrc2 >> 11 & 0x3) + 1,
        scratch_enabled=bool(rsrc2 & 1),
        wavefront_size32=bool(props >> _KD_WAVE32_BIT & 1),
        uses_dynamic_stack=bool(props >> _KD_DYNAMIC_STACK_BIT & 1),
        kernarg_preload=preload & 0x7F,
    )


def _check_feature(target: Target, name: str, flags: int) -> str:
    mask, shift = EF_AMDGPU_FEATURE[name]
    setting = _SETTING[(flags & mask) >> shift]
    wanted = target.feature(name)
    if wanted is None:
        # The target ID leaves it open: the object must run either way ("any"), or not
        # know the feature at all (LLVM 24 stopped recording xnack for gfx1250).
        if setting not in ("any", "unsupported"):
            raise CodeObjectError(f"code object requires {name} {setting}, target {target} does not ask for it")
    elif setting != ("on" if wanted else "off"):
        raise CodeObjectError(f"code object has {name} {setting}, target {target} wants {name}{'+' if wanted else '-'}")
    return setting


def _pick_kernel(kernels: list[dict], kernel: str | None) -> dict:
    names = [k.get(".name") for k in kernels]
    if not kernels:
        # e.g. LLVM silently drops a kernel it cannot compile for the wave size asked for
        raise CodeObjectError("code object has no kernels in its metadata")
    if kernel is None:
        if len(kernels) != 1:
            raise CodeObjectError(f"code object has {len(kernels)} kernels ({names}); name the one to validate")
        return kernels[0]
    for k in kernels:
        if k.get(".name") == kernel:
            return k
    raise CodeObjectError(f"kernel {kernel!r} not in the code object metadata (kernels: {names})")


# ---------------------------------------------------------------- validation


def validate(data: bytes, target: object, *, kernel: str | None = None) -> CodeObjectInfo:
    """Check a code object against ``target``; CodeObjectError says what is wrong."""
    target = Target.parse(target)
    elf = _elf(data)
    try:
        if not target.is_amdgpu:
            return _validate_cubin(elf, target, kernel)
        return _validate_hsaco(elf, target, kernel)
    except (ELFError, struct.error) as e:
        raise CodeObjectError(f"malformed ELF: {e}") from None


def _validate_hsaco(elf: ELFFile, target: Target, kernel: str | None) -> CodeObjectInfo:
    machine = _machine(elf)
    if machine != EM_AMDGPU:
        raise CodeObjectError(f"ELF machine is {machine}, expected EM_AMDGPU ({EM_AMDGPU}) for {target}")
    osabi = _raw_ident(elf, "EI_OSABI")
    if osabi != ELFOSABI_AMDGPU_HSA:
        raise CodeObjectError(f"ELF OS ABI is {osabi}, expected ELFOSABI_AMDGPU_HSA ({ELFOSABI_AMDGPU_HSA})")
    cov = _CODE_OBJECT_VERSION.get(_raw_ident(elf, "EI_ABIVERSION"))
    if cov is None or cov < 4:
        raise CodeObjectError(f"unsupported AMDHSA ABI version {_raw_ident(elf, 'EI_ABIVERSION')} (need code object v4+)")
    flags = elf.header["e_flags"]
    mach = flags & EF_AMDGPU_MACH_MASK
    expected = EF_AMDGPU_MACH[target.processor]
    if mach != expected:
        have = next((p for p, v in EF_AMDGPU_MACH.items() if v == mach), f"mach 0x{mach:03x}")
        raise CodeObjectError(f"code object is for {have}, not {target.processor} (e_flags 0x{flags:x})")
    xnack = _check_feature(target, "xnack", flags)
    sramecc = _check_feature(target, "sramecc", flags)

    meta = _metadata(elf)
    meta_target = meta.get("amdhsa.target")
    # "amdgcn-amd-amdhsa--gfx942:xnack-" (LLVM 22) or "amdgpu9.42-amd-amdhsa-unknown-gfx942" (LLVM 24)
    if not isinstance(meta_target, str) or meta_target.split(":")[0].rsplit("-", 1)[-1] != target.processor:
        raise CodeObjectError(f"metadata amdhsa.target {meta_target!r} is not for {target.processor}")
    k = _pick_kernel(meta.get("amdhsa.kernels") or [], kernel)
    name = k.get(".name")
    symbols = _symbols(elf)
    func, kd_sym = symbols.get(name), symbols.get(k.get(".symbol") or f"{name}.kd")
    if func is None or func["st_info"]["type"] != "STT_FUNC":
        raise CodeObjectError(f"kernel symbol {name!r} (STT_FUNC) missing")
    if kd_sym is None or kd_sym["st_info"]["type"] != "STT_OBJECT":
        raise CodeObjectError(f"kernel descriptor symbol {name}.kd missing")
    kd = decode_kernel_descriptor(_symbol_bytes(elf, kd_sym))

    info = CodeObjectInfo(
        format="hsaco",
        target=target.id,
        kernel=name,
        e_flags=flags,
        code_object_version=cov,
        xnack=xnack,
        sramecc=sramecc,
        metadata_target=meta_target,
        kernarg_size=k.get(".kernarg_segment_size"),
        kernarg_align=k.get(".kernarg_segment_align"),
        args=tuple(
            KernelArg(a.get(".name", ""), a[".offset"], a[".size"], a[".value_kind"], a.get(".address_space"))
            for a in k.get(".args", [])
        ),
        vgpr_count=k.get(".vgpr_count"),
        sgpr_count=k.get(".sgpr_count"),
        agpr_count=k.get(".agpr_count", 0),
        vgpr_spill_count=k.get(".vgpr_spill_count"),
        sgpr_spill_count=k.get(".sgpr_spill_count"),
        lds_bytes=k.get(".group_segment_fixed_size"),
        private_segment_bytes=k.get(".private_segment_fixed_size"),
        wavefront_size=k.get(".wavefront_size"),
        max_flat_workgroup_size=k.get(".max_flat_workgroup_size"),
        descriptor=kd,
        comment=_comment(elf),
    )
    _check_arch_limits(info, target)
    return info


def _check_arch_limits(info: CodeObjectInfo, target: Target) -> None:
    arch = target.info
    if info.wavefront_size != arch.wave_size:
        raise CodeObjectError(f"kernel {info.kernel} uses wave{info.wavefront_size}; {target.processor} runs wave{arch.wave_size}")
    if info.descriptor.wavefront_size32 != (arch.wave_size == 32):
        raise CodeObjectError(f"kernel descriptor wave32 bit disagrees with {target.processor}'s wave{arch.wave_size}")
    if info.lds_bytes is None or info.lds_bytes > arch.lds_bytes:
        raise CodeObjectError(f"kernel {info.kernel} needs {info.lds_bytes} bytes of LDS; {target.processor} has {arch.lds_bytes}")
    if info.descriptor.group_segment_fixed_size != info.lds_bytes:
        raise CodeObjectError("kernel descriptor LDS size disagrees with the metadata")
    if info.kernarg_size is None or info.descriptor.kernarg_size != info.kernarg_size:
        raise CodeObjectError("kernel descriptor kernarg size disagrees with the metadata")
    # On the unified-register archs (gfx90a+) .vgpr_count is already the total of VGPRs and
    # AGPRs (LLVM's TotalNumVgprs: 9 VGPRs + 32 AGPRs report 44), so it alone is compared.
    if (info.vgpr_count or 0) > arch.max_vgprs:
        raise CodeObjectError(f"kernel {info.kernel} uses {info.vgpr_count} VGPRs (AGPRs included); "
                              f"{target.processor} has {arch.max_vgprs}")
    if (info.sgpr_count or 0) > arch.max_sgpr_count:  # .sgpr_count includes VCC/FLAT_SCRATCH/XNACK
        raise CodeObjectError(f"kernel {info.kernel} uses {info.sgpr_count} SGPRs; {target.processor} has {arch.max_sgpr_count}")


def _validate_cubin(elf: ELFFile, target: Target, kernel: str | None) -> CodeObjectInfo:
    machine = _machine(elf)
    if machine != EM_CUDA:
        raise CodeObjectError(f"ELF machine is {machine}, expected EM_CUDA ({EM_CUDA}) for {target}")
    flags = elf.header["e_flags"]
    sm = int(target.processor.split("_")[1])
    # The SM sits in bits 0..7 in older cubins and in bits 8..15 since CUDA 12.x/13.
    if sm not in (flags & 0xFF, flags >> 8 & 0xFF):
        raise CodeObjectError(f"cubin e_flags 0x{flags:x} do not name {target.processor}")
    funcs = [n for n, s in _symbols(elf).items() if s["st_info"]["type"] == "STT_FUNC"]
    if kernel is None:
        if len(funcs) != 1:
            raise CodeObjectError(f"cubin has {len(funcs)} functions ({funcs}); name the kernel")
        kernel = funcs[0]
    elif kernel not in funcs:
        raise CodeObjectError(f"kernel {kernel!r} not in the cubin (functions: {funcs})")
    regs, frame = _cubin_info(elf, kernel)
    shared = elf.get_section_by_name(f".nv.shared.{kernel}")
    lds = shared["sh_size"] if shared is not None else 0
    if lds and any(sec.name.startswith(".nv.shared.reserved") for sec in elf.iter_sections()):
        # The section spans the system's reserved area too (1 KB on sm_90): measured on an H200,
        # section size - 1024 == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES for all 832 sm_90 kernels
        # (docs/bench-raw/h200-run1/occupancy.json); the reservation is counted by residency instead.
        lds = max(0, lds - target.info.lds_reserved_per_group)
    return CodeObjectInfo(format="cubin", target=target.id, kernel=kernel, e_flags=flags,
                          wavefront_size=32, comment=_comment(elf), vgpr_count=regs,
                          private_segment_bytes=frame, lds_bytes=lds)


_EIFMT_SVAL = 0x04
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F


def _cubin_info(elf: ELFFile, kernel: str) -> tuple[int | None, int | None]:
    """(registers per thread, frame bytes) of ``kernel`` from the global .nv.info records."""
    sec = elf.get_section_by_name(".nv.info")
    if sec is None:
        return None, None
    index = next((i for i, sym in enumerate(elf.get_section_by_name(".symtab").iter_symbols())
                  if sym.name == kernel), None)
    data, i, regs, frame = sec.data(), 0, None, None
    while i < len(data):
        if i + 4 > len(data):
            raise CodeObjectError(f"cubin .nv.info: truncated record at byte {i} of {len(data)}")
        fmt, attr, size = data[i], data[i + 1], int.from_bytes(data[i + 2:i + 4], "little")
        if fmt != _EIFMT_SVAL:  # EIFMT_NVAL / BVAL / HVAL: the u16 is the value, nothing follows
            i += 4
            continue
        if i + 4 + size > len(data):
            raise CodeObjectError(f"cubin .nv.info: record 0x{attr:x} at byte {i} claims {size} bytes, "
                                  f"{len(data) - i - 4} remain")
        if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and size >= 8:
            sym, value = int.from_bytes(data[i + 4:i + 8], "little"), int.from_bytes(data[i + 8:i + 12], "little")
            if sym == index:
                if attr == _EIATTR_REGCOUNT:
                    regs = value
                else:
                    frame = value
        i += 4 + size
    return regs, frame


# ---------------------------------------------------------------- launch layout

_VALUE_KIND = {"global_pointer": "global_buffer", "scalar": "by_value"}
# PTX parameter state-space types per contract argument (PTX ISA: .param; pointers are .u64
# in the nvptx64 ABI, with .ptr .global attributes; i32 is .u32 or .s32, i64 .u64 or .s64).
_PTX_TYPES = {"global_pointer": ("u64",), "i32": ("u32", "s32", "b32"), "u32": ("u32", "b32"),
              "i64": ("u64", "s64", "b64")}
_PTX_PARAM = re.compile(r"\.param\s+\.([busf]\d+)((?:\s+\.\w+)*?)(?:\s+\.align\s+(\d+))?\s+([\w$]+)")


def ptx_params(ptx: str, kernel: str) -> tuple[tuple[str, str], ...]:
    """(PTX type, parameter name) of ``kernel``'s .entry, in order."""
    m = re.search(r"\.entry\s+" + re.escape(kernel) + r"\s*\(([^)]*)\)", ptx)
    if m is None:
        raise CodeObjectError(f"PTX has no .entry {kernel}")
    return tuple((p.group(1), p.group(4)) for p in _PTX_PARAM.finditer(m.group(1)))


def launch_layout(contract: LaunchContract, info: CodeObjectInfo, ptx: str | None = None) -> LaunchContract:
    """The contract with the compiled object's own kernarg layout (CodeObjectError on any mismatch)."""
    if not isinstance(contract, LaunchContract):
        raise CodeObjectError(f"no launch contract to lay out for {info.kernel} (lowered outside aot.lower.lower?)")
    if info.format == "cubin":
        if ptx is None:
            raise CodeObjectError(f"{contract.kernel}: a cubin's layout is checked against its PTX; none given")
        params = ptx_params(ptx, contract.kernel)
        if len(params) != len(contract.args):
            raise CodeObjectError(f"{contract.kernel}: PTX has {len(params)} parameters, the lowering "
                                  f"{len(contract.args)}")
        for i, (a, (ty, name)) in enumerate(zip(contract.args, params, strict=True)):
            want = _PTX_TYPES["global_pointer" if a.kind == "global_pointer" else a.dtype]
            if ty not in want or int(ty[1:]) // 8 != a.size or not name.endswith(f"_param_{i}"):
                raise CodeObjectError(f"{contract.kernel}: PTX parameter {i} is .{ty} {name}, the lowering "
                                      f"has {a.name} ({a.kind} {a.dtype}, {a.size} bytes)")
        return contract
    if len(info.args) != len(contract.args):
        raise CodeObjectError(f"{contract.kernel}: code object has {len(info.args)} kernel arguments, the "
                              f"lowering {len(contract.args)}")
    laid = []
    for a, k in zip(contract.args, info.args, strict=True):
        if k.name != a.name or k.value_kind != _VALUE_KIND[a.kind]:
            raise CodeObjectError(f"{contract.kernel}: code object argument {k.name} ({k.value_kind}) is not "
                                  f"the lowering's {a.name} ({a.kind})")
        if (k.offset, k.size) != (a.offset, a.size):
            raise CodeObjectError(f"{contract.kernel}: argument {a.name} is at {k.offset} ({k.size} bytes) in the "
                                  f"code object, at {a.offset} ({a.size} bytes) in the lowering")
        if a.kind == "scalar" and SCALAR_TYPES[a.dtype][0] != k.size:
            raise CodeObjectError(f"{contract.kernel}: argument {a.name} is {k.size} bytes, {a.dtype} is not")
        laid.append(dataclasses.replace(a, offset=k.offset, size=k.size))
    if info.kernarg_size is None or info.kernarg_size < contract.kernarg_size:
        raise CodeObjectError(f"{contract.kernel}: kernarg segment {info.kernarg_size} bytes, the arguments "
                              f"need {contract.kernarg_size}")
    return dataclasses.replace(contract, args=tuple(laid), kernarg_size=info.kernarg_size)

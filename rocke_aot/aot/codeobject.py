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

    cubin: EM_CUDA (190), the SM in e_flags, the kernel symbol (STT_FUNC), then its resources
      ├── .nv.info (global)      records keyed by symbol index: EIATTR_REGCOUNT (0x2f, required),
      │                          EIATTR_FRAME_SIZE (0x11), EIATTR_MIN_STACK_SIZE (0x12)
      ├── .nv.info.<kernel>      EIATTR_MAX_THREADS (0x05, from .maxntid), EIATTR_REQNTID (0x10,
      │                          from .reqntid), EIATTR_NUM_BARRIERS (0x4c), and records that
      │                          carry no resource (parameters, instruction offsets, versions)
      ├── .nv.shared.<kernel>    NOBITS; its size is the static shared memory + the 1 KiB the
      │                          system reserves per block (see below); absent: none
      └── arch limits: registers and shared memory within sm_90's
                                           │
                               CodeObjectInfo (resources below) or CodeObjectError

    .nv.info records (as ptxas writes them, CUDA 12.9 and 13.0; checked with ptxas -v): u8 format,
    u8 attribute, then EIFMT_SVAL (4): u16 size + that many bytes; EIFMT_HVAL (3) / EIFMT_BVAL (2):
    a u16 value; EIFMT_NVAL (1): a u16 with no meaning. Symbol-keyed svals hold (u32 symbol
    index, u32 value); MAX_THREADS / REQNTID hold (u32 x, y, z).
    A truncated record, an unknown format, a record that would change what the kernel occupies
    or how it launches in a way not modelled here, by name (shared-memory spill scratch,
    clusters, register reconfiguration, recursion's stack, reserved-smem records, programmatic
    dependent launch), a duplicate, or a record of the wrong size is a CodeObjectError naming the
    section: the resources fail closed, never a silently wrong number. A record this module has
    no name for passes once its framing is checked: the resources are read from the named records
    only, and each CUDA release adds records (CUDA 13.5: 0x66 EIATTR_LANGUAGE, 0x6b, 0x6d) that
    would otherwise fail every build made with it.

    cubin field mapping (CodeObjectInfo; what ptxas -v prints for the same PTX):
        vgpr_count             EIATTR_REGCOUNT: registers per thread      ("Used N registers")
        lds_bytes              size(.nv.shared.K) - lds_reserved_per_group (1024 on sm_90), 0
                               without the section: the kernel's own static shared memory
                               ("M bytes smem"; the driver's CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES).
                               ptxas lays the kernel's variables out after the 1 KiB window
                               CUDA reserves per block (symbol .nv.reservedSmem.offset0), so
                               the section is 1024 bytes larger than -v says. What the hardware
                               allocates per block is roundup(lds_bytes + 1024, 128) -- it
                               reserves the 1 KiB for every block, with or without a section
                               (rocke_aot/candidates.py adds it from the arch table)
        private_segment_bytes  max(EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE): per-thread local
                               memory incl. callees ("S bytes stack frame", "cumulative stack")
        max_flat_workgroup_size  product of EIATTR_REQNTID, else of EIATTR_MAX_THREADS; None
                               when the PTX declares neither
        barrier_count          EIATTR_NUM_BARRIERS ("used B barriers"; CUDA 13), else bits 20..26
                               of the .text.K section flags (where CUDA 12.x ptxas keeps it);
                               None when neither states one (ptxas writes nothing for 0)
        sgpr_count, agpr_count, spill counts: None (no such records; ptxas -v alone prints spills)

    record_metadata(sent, info) -> metadata   what a publish stores and a client accepts from a
        server: ``sent`` with the resources read from the code object itself (never the
        sender's numbers; the one exception is an sm_90 cubin's "schedule", aot/sass.py: reading
        it needs cuobjdump, which a service host or a client does not have, so the sender's is
        kept after record.check_schedule checks its form: a ranking hint derived from these
        bytes, which can misorder candidates but never makes a launch wrong), checked by the record schema (rocke_aot/record.py: kernel name and
        kernarg size agree), the launch contract laid out against the object (hsaco: every
        argument's offset, size and kind) and its block within the object's maximum work-group
        size; CodeObjectError / RecordError otherwise

    launch_layout(contract, info, ptx=None) -> LaunchContract
        hsaco: every argument's offset/size from the metadata note's .args (value_kind
               global_buffer / by_value must match pointer / scalar), kernarg size from
               .kernarg_segment_size; any disagreement with the lowering is a CodeObjectError
        cubin: the PTX .entry's .param list (count, order, .u64 pointers / .u32 scalars) must
               match the lowering's kernargs, which then stand as the layout

Encodings are from LLVM's AMDGPUUsage (ELF header e_flags for code object v4+,
the kernel descriptor, the code object metadata); pyelftools parses the ELF and
msgpack the metadata note. NVIDIA documents no cubin format: the .nv.info framing and the
EIATTR_* codes and names above are those public cubin references list (the names cuobjdump
-elf prints); every field read here was checked against ptxas -v on the same PTX (CUDA 12.9
and 13.0) and against the driver's function attributes for the same cubins on an H200. The
only bytes walked by hand are those records.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import struct
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import msgpack
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection

from rocke_aot import record
from rocke_aot.errors import CodeObjectError, RockeError, SpecError
from rocke_aot.launch import SCALAR_TYPES, FormulaError, LaunchContract, evaluate
from rocke_aot.targets import ELF_MACHINE, Target

EM_AMDGPU = ELF_MACHINE["amdgcn"]  # 224
EM_CUDA = ELF_MACHINE["nvptx64"]  # 190
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
class MetadataArg:
    """One kernel argument as the code object's metadata note states it (.args): what
    launch_layout checks the launch contract's KernelArgs against."""

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
    target: Target  # what it was validated against (stored as its canonical target ID)
    kernel: str
    e_flags: int
    code_object_version: int | None = None
    xnack: str | None = None  # "on" | "off" | "any" | "unsupported"
    sramecc: str | None = None
    metadata_target: str | None = None  # amdhsa.target
    kernarg_size: int | None = None
    kernarg_align: int | None = None
    args: tuple[MetadataArg, ...] = ()
    vgpr_count: int | None = None
    sgpr_count: int | None = None
    agpr_count: int | None = None
    vgpr_spill_count: int | None = None
    sgpr_spill_count: int | None = None
    lds_bytes: int | None = None  # group_segment_fixed_size
    private_segment_bytes: int | None = None  # per work-item scratch (spills, stack)
    wavefront_size: int | None = None
    max_flat_workgroup_size: int | None = None
    barrier_count: int | None = None  # cubin: named barriers a block uses (EIATTR_NUM_BARRIERS)
    descriptor: KernelDescriptor | None = None
    comment: tuple[str, ...] = ()  # .comment strings (linker / producer versions)
    # ptxas's schedule (sm_90 cubins) in its stored form (rocke_aot/candidates.py Schedule.as_dict()),
    # set by the builder from aot/sass.py read_schedule: validate() never runs a tool, so it leaves
    # this None (stored only when set). A plain mapping, not the Schedule type: this module is on the
    # recipe digest (aot/recipe.py) and the selection's vocabulary is not
    schedule: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types (tuples become lists), as stored in artifact metadata."""
        d = json.loads(json.dumps(asdict(dataclasses.replace(self, schedule=None))))
        d["target"] = self.target.id
        del d["schedule"]
        if self.schedule is not None:
            d["schedule"] = dict(self.schedule)
        return d


# ---------------------------------------------------------------- helpers


_PARSE_ERRORS = (ValueError, KeyError, IndexError, AttributeError, OverflowError, TypeError, UnicodeDecodeError,
                 RecursionError, MemoryError, EOFError, AssertionError)


def _elf(data: bytes) -> ELFFile:
    if not isinstance(data, (bytes, bytearray)) or len(data) < 64:
        raise CodeObjectError(f"not a code object: {len(data) if data else 0} bytes")
    try:
        elf = ELFFile(io.BytesIO(bytes(data)))
        elf.num_sections()
        return elf
    except (ELFError, struct.error, *_PARSE_ERRORS) as e:
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
        if isinstance(sec, SymbolTableSection):  # .dynsym and .symtab are (pyelftools)
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
        if sec["sh_type"] != "SHT_NOTE" or not isinstance(sec, NoteSection):  # pyelftools' SHT_NOTE type
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


def validate(data: bytes, target: Target, *, kernel: str | None = None) -> CodeObjectInfo:
    """Check a code object against ``target``; CodeObjectError says what is wrong."""
    elf = _elf(data)
    try:
        if not target.is_amdgpu:
            return _validate_cubin(elf, target, kernel)
        return _validate_hsaco(elf, target, kernel)
    except RockeError:
        raise
    except (ELFError, struct.error) as e:
        raise CodeObjectError(f"malformed ELF: {e}") from None
    except _PARSE_ERRORS as e:
        # pyelftools and msgpack walk offsets and sizes the file states: a crafted header
        # makes them fail in their own ways (found by tests/test_hostile_records.py's fuzz).
        # Every such failure is the code object's fault: a named error, never a 500.
        raise CodeObjectError(f"malformed code object ({type(e).__name__}: {e})") from None


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
    if not isinstance(name, str):
        raise CodeObjectError(f"kernel symbol {name!r} (STT_FUNC) missing")
    symbols = _symbols(elf)
    func, kd_sym = symbols.get(name), symbols.get(k.get(".symbol") or f"{name}.kd")
    if func is None or func["st_info"]["type"] != "STT_FUNC":
        raise CodeObjectError(f"kernel symbol {name!r} (STT_FUNC) missing")
    if kd_sym is None or kd_sym["st_info"]["type"] != "STT_OBJECT":
        raise CodeObjectError(f"kernel descriptor symbol {name}.kd missing")
    kd = decode_kernel_descriptor(_symbol_bytes(elf, kd_sym))

    info = CodeObjectInfo(
        format="hsaco",
        target=target,
        kernel=name,
        e_flags=flags,
        code_object_version=cov,
        xnack=xnack,
        sramecc=sramecc,
        metadata_target=meta_target,
        kernarg_size=k.get(".kernarg_segment_size"),
        kernarg_align=k.get(".kernarg_segment_align"),
        args=tuple(
            MetadataArg(a.get(".name", ""), a[".offset"], a[".size"], a[".value_kind"], a.get(".address_space"))
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
    kd = info.descriptor
    assert kd is not None, "_validate_hsaco decodes the kernel descriptor before these checks"
    if kd.wavefront_size32 != (arch.wave_size == 32):
        raise CodeObjectError(f"kernel descriptor wave32 bit disagrees with {target.processor}'s wave{arch.wave_size}")
    if info.lds_bytes is None or info.lds_bytes > arch.lds_bytes:
        raise CodeObjectError(f"kernel {info.kernel} needs {info.lds_bytes} bytes of LDS; {target.processor} has {arch.lds_bytes}")
    if kd.group_segment_fixed_size != info.lds_bytes:
        raise CodeObjectError("kernel descriptor LDS size disagrees with the metadata")
    if info.kernarg_size is None or kd.kernarg_size != info.kernarg_size:
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
    syms = _symbols(elf)
    funcs = [n for n, s in syms.items() if s["st_info"]["type"] == "STT_FUNC"]
    if kernel is None:
        # The kernel is the global function; ptxas may add weak helpers of its own (the slow
        # path of a correctly rounded f32 reciprocal, "$__internal_0_$__cuda_sm20_rcp_rn_f32_slowpath").
        entries = [n for n in funcs if syms[n]["st_info"]["bind"] == "STB_GLOBAL"]
        if len(entries) != 1:
            raise CodeObjectError(f"cubin has {len(entries)} global functions ({entries}; all functions: "
                                  f"{funcs}); name the kernel")
        kernel = entries[0]
    elif kernel not in funcs:
        raise CodeObjectError(f"kernel {kernel!r} not in the cubin (functions: {funcs})")
    res = _cubin_resources(elf, target, kernel)
    info = CodeObjectInfo(format="cubin", target=target, kernel=kernel, e_flags=flags,
                          wavefront_size=32, comment=_comment(elf), **res)
    arch = target.info
    assert info.vgpr_count is not None and info.lds_bytes is not None, "_cubin_resources reads both"
    if info.vgpr_count > arch.max_vgprs:
        raise CodeObjectError(f"kernel {kernel} uses {info.vgpr_count} registers per thread; "
                              f"{target.processor} has {arch.max_vgprs}")
    if info.lds_bytes > arch.static_lds_limit:
        raise CodeObjectError(f"kernel {kernel} declares {info.lds_bytes} bytes of static shared memory; "
                              f"{target.processor} allows {arch.static_lds_limit}")
    return info


# ---------------------------------------------------------------- cubin resources

EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
# EIATTR codes (the names CUDA's cuobjdump prints) this module reads.
EIATTR_MAX_THREADS, EIATTR_REQNTID = 0x05, 0x10
EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_REGCOUNT = 0x11, 0x12, 0x2F
EIATTR_CRS_STACK_SIZE, EIATTR_NUM_BARRIERS = 0x1E, 0x4C
_KERNEL_ATTRS = {EIATTR_MAX_THREADS: "EIATTR_MAX_THREADS", EIATTR_REQNTID: "EIATTR_REQNTID",
                 EIATTR_NUM_BARRIERS: "EIATTR_NUM_BARRIERS", EIATTR_CRS_STACK_SIZE: "EIATTR_CRS_STACK_SIZE"}
_SYMBOL_KEYED = {EIATTR_REGCOUNT: "EIATTR_REGCOUNT", EIATTR_FRAME_SIZE: "EIATTR_FRAME_SIZE",
                 EIATTR_MIN_STACK_SIZE: "EIATTR_MIN_STACK_SIZE"}
# Records that say nothing about registers, shared or local memory, block size or barriers
# (parameter layout, instruction-offset lists for the driver's patching, flags, versions):
# skipped after their framing is checked. Seen in the served sm_90 grid (all 832 kernels of
# gemm / conv_direct_fwd / conv_dgrad_patch, ptxas 13.0): 0x0a 0x17 0x19 0x1b 0x1c 0x36 0x37
# 0x44 0x50 0x55 0x5f, besides the ones read above.
_NO_RESOURCE = {
    0x04: "EIATTR_CTAIDZ_USED", 0x0A: "EIATTR_PARAM_CBANK", 0x0C: "EIATTR_CBANK_PARAM_OFFSETS",
    0x17: "EIATTR_KPARAM_INFO", 0x19: "EIATTR_CBANK_PARAM_SIZE", 0x1B: "EIATTR_MAXREG_COUNT",
    0x1C: "EIATTR_EXIT_INSTR_OFFSETS", 0x1D: "EIATTR_S2RCTAID_INSTR_OFFSETS", 0x21: "EIATTR_EXPLICIT_CACHING",
    0x22: "EIATTR_ISTYPEP_USED", 0x24: "EIATTR_SUQ_USED", 0x25: "EIATTR_LD_CACHEMOD_INSTR_OFFSETS",
    0x26: "EIATTR_LOAD_CACHE_REQUEST", 0x27: "EIATTR_ATOM_SYS_INSTR_OFFSETS",
    0x28: "EIATTR_COOP_GROUP_INSTR_OFFSETS",
    # the registers of warp-wide (shuffle, vote) instructions at those offsets: Triton's reductions
    # (softmax_kernel, ptxas 12.8; cuobjdump -elf names it)
    0x29: "EIATTR_COOP_GROUP_MASK_REGIDS", 0x2A: "EIATTR_SW1850030_WAR", 0x2B: "EIATTR_WMMA_USED",
    0x2D: "EIATTR_ATOMF16_EMUL_INSTR_OFFSETS", 0x30: "EIATTR_SW2393858_WAR",
    0x31: "EIATTR_INT_WARP_WIDE_INSTR_OFFSETS", 0x33: "EIATTR_STATISTICS", 0x34: "EIATTR_INDIRECT_BRANCH_TARGETS",
    0x35: "EIATTR_SW2861232_WAR", 0x36: "EIATTR_SW_WAR", 0x37: "EIATTR_CUDA_API_VERSION",
    0x38: "EIATTR_NUM_MBARRIERS", 0x39: "EIATTR_MBARRIER_INSTR_OFFSETS", 0x44: "EIATTR_UNUSED_LOAD_BYTE_OFFSET",
    0x45: "EIATTR_KPARAM_INFO_V2", 0x46: "EIATTR_SYSCALL_OFFSETS", 0x47: "EIATTR_SW_WAR_MEMBAR_SYS_INSTR_OFFSETS",
    0x4E: "EIATTR_PERF_STATISTICS", 0x50: "EIATTR_SPARSE_MMA_MASK",
    0x55: "EIATTR_ANNOTATIONS",  # (kind, instruction offset) pairs; ptxas marks spill loads/stores
    0x57: "EIATTR_STACK_CANARY_TRAP_OFFSETS", 0x59: "EIATTR_LOCAL_CTA_ASYNC_STORE_OFFSETS",
    0x5F: "EIATTR_MERCURY_ISA_VERSION",
    # CUDA 13.5's ptxas (13.5.37, the wheel scripts/setup.sh pins; 13.0.88 writes none of them) adds
    # these to every sm_90 kernel; the names are what its cuobjdump -elf prints: the source language
    # (sval u32, 3 = PTX) and a software-workaround flag (hval)
    0x66: "EIATTR_LANGUAGE", 0x6B: "EIATTR_NVSAL_SW_WAR",
}
# bval: 1 when the kernel executes griddepcontrol.launch_dependents (SASS PREEXIT: programmatic
# dependent launch lets the next grid start before this one exits); 0 is accepted, anything else
# changes how the kernel launches and is refused by name (checked: ptxas 13.5.37 on a PTX with and
# without the instruction)
EIATTR_PREEXIT_USED = 0x6D
# Known, but they change what a block occupies in ways the resources above do not model.
_NOT_MODELLED = {
    0x23: "EIATTR_MAX_STACK_SIZE (recursion)", 0x32: "EIATTR_SHARED_SCRATCH", 0x3B: "EIATTR_SAM_REGION_STACK_SIZE",
    0x3D: "EIATTR_CTA_PER_CLUSTER", 0x3E: "EIATTR_EXPLICIT_CLUSTER", 0x3F: "EIATTR_MAX_CLUSTER_RANK",
    0x41: "EIATTR_RESERVED_SMEM_USED", 0x42: "EIATTR_RESERVED_SMEM_0_SIZE", 0x54: "EIATTR_REG_RECONFIG",
    0x5B: "EIATTR_BLOCKS_ARE_CLUSTERS",
}
_RESERVED_SMEM_SYMBOL = ".nv.reservedSmem.offset0"
_TEXT_BARRIER_SHIFT = 20


def _nv_info_records(sec) -> list[tuple[int, int, int, bytes]]:
    """(offset, format, attribute, payload) of every record; CodeObjectError on bad framing."""
    data, out, i = sec.data(), [], 0
    while i < len(data):
        if len(data) - i < 4:
            raise CodeObjectError(f"{sec.name}: truncated record at offset {i} ({len(data) - i} bytes left)")
        fmt, attr, half = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
        if fmt == EIFMT_SVAL:
            if i + 4 + half > len(data):
                raise CodeObjectError(f"{sec.name}: record 0x{attr:02x} at offset {i} claims {half} bytes, "
                                      f"{len(data) - i - 4} remain (truncated)")
            out.append((i, fmt, attr, bytes(data[i + 4:i + 4 + half])))
            i += 4 + half
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            out.append((i, fmt, attr, bytes(data[i + 2:i + 4])))
            i += 4
        else:
            raise CodeObjectError(f"{sec.name}: record at offset {i} has unknown format {fmt}")
    return out


def _u32s(sec, off: int, attr: str, payload: bytes, count: int) -> tuple[int, ...]:
    if len(payload) != 4 * count:
        raise CodeObjectError(f"{sec.name}: {attr} at offset {off} has {len(payload)} bytes, expected {4 * count}")
    return struct.unpack(f"<{count}I", payload)


def _check_known(sec, off: int, attr: int, payload: bytes) -> None:
    """Refuse, by name, a record that changes the kernel's resources or launch in a way the fields
    above do not model; every other record (named in _NO_RESOURCE, or one a newer ptxas adds that
    this module has no name for) passes: what a kernel occupies is read from the records above and
    the .nv.shared section, never from an unknown record, so a newer CUDA does not fail the build."""
    if attr in _NOT_MODELLED:
        raise CodeObjectError(f"{sec.name}: {_NOT_MODELLED[attr]} (0x{attr:02x}) at offset {off} changes the "
                              "kernel's resources in a way this validator does not model")
    if attr == EIATTR_PREEXIT_USED and any(payload):
        raise CodeObjectError(f"{sec.name}: EIATTR_PREEXIT_USED (0x{attr:02x}) at offset {off} is "
                              f"0x{payload.hex()}: the kernel triggers programmatic dependent launch "
                              "(griddepcontrol.launch_dependents), a launch this runner does not model")


def _cubin_resources(elf: ELFFile, target: Target, kernel: str) -> dict[str, Any]:
    """CodeObjectInfo fields from the cubin's .nv.info records and .nv.shared section (module doc)."""
    symtab = elf.get_section_by_name(".symtab")
    index = next((i for i, sym in enumerate(symtab.iter_symbols()) if sym.name == kernel), None) \
        if isinstance(symtab, SymbolTableSection) else None
    if index is None or not isinstance(symtab, SymbolTableSection):
        raise CodeObjectError(f"kernel {kernel!r} has no .symtab entry")
    shndx = symtab.get_symbol(index)["st_shndx"]
    if not isinstance(shndx, int):
        raise CodeObjectError(f"kernel {kernel!r} is not defined in a section ({shndx})")

    keyed: dict[int, int] = {}
    glob = elf.get_section_by_name(".nv.info")
    if glob is None:
        raise CodeObjectError("cubin has no .nv.info section (no register counts)")
    seen: set[tuple[int, int]] = set()
    for off, fmt, attr, payload in _nv_info_records(glob):
        if attr in _SYMBOL_KEYED:
            if fmt != EIFMT_SVAL:
                raise CodeObjectError(f"{glob.name}: {_SYMBOL_KEYED[attr]} at offset {off} has format {fmt}, "
                                      f"expected {EIFMT_SVAL}")
            sym, value = _u32s(glob, off, _SYMBOL_KEYED[attr], payload, 2)
            if (attr, sym) in seen:
                raise CodeObjectError(f"{glob.name}: second {_SYMBOL_KEYED[attr]} for symbol {sym} at offset {off}")
            seen.add((attr, sym))
            if sym == index:
                keyed[attr] = value
        else:
            _check_known(glob, off, attr, payload)
    if EIATTR_REGCOUNT not in keyed:
        raise CodeObjectError(f"{glob.name}: no EIATTR_REGCOUNT for kernel {kernel} (symbol {index})")

    name = f".nv.info.{kernel}"
    own = elf.get_section_by_name(name)
    if own is None:
        raise CodeObjectError(f"cubin has no {name} section")
    if own["sh_info"] != shndx:
        raise CodeObjectError(f"{name} describes section {own['sh_info']}, the kernel lives in {shndx}")
    attrs: dict[int, int] = {}
    for off, fmt, attr, payload in _nv_info_records(own):
        label = _KERNEL_ATTRS.get(attr)
        if label is None:
            _check_known(own, off, attr, payload)
            continue
        if attr in attrs:
            raise CodeObjectError(f"{name}: second {label} at offset {off}")
        if attr == EIATTR_NUM_BARRIERS:
            # EIFMT_BVAL: a byte of value and a byte of padding; EIFMT_HVAL: a u16
            value = struct.unpack("<H", payload)[0]
            if fmt not in (EIFMT_BVAL, EIFMT_HVAL) or (fmt == EIFMT_BVAL and value > 0xFF):
                raise CodeObjectError(f"{name}: {label} at offset {off} has format {fmt}, value 0x{payload.hex()}")
            attrs[attr] = value
            continue
        if fmt != EIFMT_SVAL:
            raise CodeObjectError(f"{name}: {label} at offset {off} has format {fmt}, expected {EIFMT_SVAL}")
        if attr == EIATTR_CRS_STACK_SIZE:
            if _u32s(own, off, label, payload, 1)[0]:
                raise CodeObjectError(f"{name}: {label} at offset {off} is not 0 (a call-return stack is not "
                                      "modelled)")
            attrs[attr] = 0
            continue
        dims = _u32s(own, off, label, payload, 3)
        if min(dims) < 1:
            raise CodeObjectError(f"{name}: {label} at offset {off} is {dims}")
        attrs[attr] = dims[0] * dims[1] * dims[2]
    # Barriers: CUDA 13 ptxas writes EIATTR_NUM_BARRIERS; CUDA 12.x ptxas wrote none and kept the
    # count in bits 20..26 of the kernel's .text section flags (both checked against ptxas -v).
    legacy = elf.get_section(shndx)["sh_flags"] >> _TEXT_BARRIER_SHIFT & 0x7F
    if legacy and attrs.get(EIATTR_NUM_BARRIERS, legacy) != legacy:
        raise CodeObjectError(f"{name}: EIATTR_NUM_BARRIERS {attrs[EIATTR_NUM_BARRIERS]} disagrees with the "
                              f"{legacy} barriers in the .text section flags")
    barriers = attrs.get(EIATTR_NUM_BARRIERS, legacy or None)
    block = attrs.get(EIATTR_REQNTID) or attrs.get(EIATTR_MAX_THREADS)
    if EIATTR_REQNTID in attrs and block is not None and attrs.get(EIATTR_MAX_THREADS, block) < block:
        raise CodeObjectError(f"{name}: .reqntid {attrs[EIATTR_REQNTID]} threads above .maxntid "
                              f"{attrs[EIATTR_MAX_THREADS]}")

    shared = elf.get_section_by_name(f".nv.shared.{kernel}")
    lds = 0
    if shared is not None:
        reserved = target.info.lds_reserved_per_group
        if shared["sh_type"] != "SHT_NOBITS" or shared["sh_info"] != shndx:
            raise CodeObjectError(f"{shared.name}: not the kernel's NOBITS shared-memory section")
        if _RESERVED_SMEM_SYMBOL not in _symbols(elf) or shared["sh_size"] < reserved:
            raise CodeObjectError(f"{shared.name}: {shared['sh_size']} bytes without the {reserved}-byte "
                                  f"reserved window ({_RESERVED_SMEM_SYMBOL}) this validator knows")
        lds = shared["sh_size"] - reserved
    frame = [keyed[a] for a in (EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE) if a in keyed]
    return {"vgpr_count": keyed[EIATTR_REGCOUNT], "lds_bytes": lds,
            "private_segment_bytes": max(frame) if frame else None,
            "max_flat_workgroup_size": block, "barrier_count": barriers}


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
    # hidden_* arguments (block counts, dynamic LDS size, ...) follow the explicit ones; the HIP
    # runtime fills them from the dispatch (Triton 3.9's gfx950 kernels read some): not the contract's
    explicit = tuple(k for k in info.args if not k.value_kind.startswith("hidden_"))
    hidden = [k.value_kind.startswith("hidden_") for k in info.args]
    if hidden != sorted(hidden):
        raise CodeObjectError(f"{contract.kernel}: hidden arguments come before explicit ones in the code object")
    if len(explicit) != len(contract.args):
        raise CodeObjectError(f"{contract.kernel}: code object has {len(explicit)} kernel arguments, the "
                              f"lowering {len(contract.args)}")
    laid = []
    for a, k in zip(contract.args, explicit, strict=True):
        # A code object may leave its arguments unnamed (Triton's): then position, kind,
        # offset and size are what is checked.
        if (k.name and k.name != a.name) or k.value_kind != _VALUE_KIND[a.kind]:
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


def record_metadata(sent: Any, info: CodeObjectInfo) -> dict[str, Any]:
    """The metadata to keep for a code object ``info`` was read from (module doc): ``sent``'s
    fields with "code_object" and "format" from ``info``; RecordError when the record schema
    refuses it, CodeObjectError when its launch contract contradicts the object."""
    if not isinstance(sent, dict):
        raise record.RecordError("metadata", f"must be an object, got {type(sent).__name__}")
    co = info.as_dict()
    sent_co = sent.get("code_object")
    if info.schedule is None and isinstance(sent_co, dict) and sent_co.get("schedule") is not None:
        co["schedule"] = sent_co["schedule"]  # the sender's reading (module doc); its form checked below
    md = {**sent, "code_object": co, "format": info.format}
    record.check_metadata(md)  # kernel name and kernarg size of the contract == the object's
    if md.get("launch") is None:
        return md
    try:
        contract = LaunchContract.from_dict(md["launch"])
    except SpecError as e:  # check_metadata parsed it once already; kept for a clear message
        raise record.RecordError("metadata.launch", str(e)) from None
    if info.format == "hsaco":
        launch_layout(contract, info)  # every argument's offset, size and kind
    try:
        block = [evaluate(b, {}) for b in contract.block]
    except FormulaError:
        block = None  # a block that depends on the problem is checked where it is planned
    most = info.max_flat_workgroup_size
    if block is not None and most is not None and block[0] * block[1] * block[2] > most:
        raise CodeObjectError(f"{contract.kernel}: the launch contract's block {tuple(block)} is over the code "
                              f"object's maximum work-group size {most}")
    lds = info.target.info.lds_bytes  # the builder's rule for a Triton build's dynamic shared memory
    if contract.dynamic_shared_bytes > lds:
        raise CodeObjectError(f"{contract.kernel}: {contract.dynamic_shared_bytes} bytes of dynamic shared memory; "
                              f"{info.target} has {lds}")
    return md

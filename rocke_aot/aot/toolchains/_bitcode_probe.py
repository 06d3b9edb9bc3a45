"""A 72-byte bitcode file that makes an LLVM bitcode reader name its own version (stdlib only).

Shared by the library workers (_triton24_worker.py, _vendor23_worker.py), which load it by path.
A library's LLVM version is what its reader says, not a version table: the reader accepts the
IDENTIFICATION block, then rejects the module and names itself in the error.
"""


class _Bits:
    """Just enough of LLVM's bitstream writer: fixed and VBR fields, 32-bit alignment."""

    def __init__(self):
        self.bits = []

    def fixed(self, value, width):
        self.bits.extend((value >> i) & 1 for i in range(width))

    def vbr(self, value, width):
        top = 1 << (width - 1)
        while value >= top:
            self.fixed((value & (top - 1)) | top, width)
            value >>= width - 1
        self.fixed(value, width)

    def align32(self):
        self.bits.extend([0] * (-len(self.bits) % 32))

    def block(self, block_id, records):
        # ENTER_SUBBLOCK (abbrev 1, width 2), block id, inner abbrev width 3, word count;
        # then UNABBREV_RECORDs (abbrev 3) and END_BLOCK (abbrev 0).
        self.fixed(1, 2)
        self.vbr(block_id, 8)
        self.vbr(3, 4)
        self.align32()
        at = len(self.bits)
        self.fixed(0, 32)
        for code, ops in records:
            self.fixed(3, 3)
            self.vbr(code, 6)
            self.vbr(len(ops), 6)
            for op in ops:
                self.vbr(op, 6)
        self.fixed(0, 3)
        self.align32()
        words = (len(self.bits) - at - 32) // 32
        self.bits[at:at + 32] = [(words >> i) & 1 for i in range(32)]

    def bytes(self):
        self.align32()
        return bytes(sum(b << i for i, b in enumerate(self.bits[k:k + 8])) for k in range(0, len(self.bits), 8))


def version_probe_bitcode():
    """IDENTIFICATION block (producer string, epoch 0) + a MODULE block with version 99.

    The reader accepts the identification block, then rejects the module version with
    "Invalid value (Producer: 'rocke-aot version probe' Reader: 'LLVM X.Y.Z')".
    """
    w = _Bits()
    for byte in b"BC\xc0\xde":
        w.fixed(byte, 8)
    w.block(13, [(1, list(b"rocke-aot version probe")), (2, [0])])  # IDENTIFICATION: STRING, EPOCH
    w.block(8, [(1, [99])])  # MODULE: VERSION 99 (the reader knows 0..2)
    return w.bytes() + bytes(8)  # the reader stops looking for modules 8 bytes before the end

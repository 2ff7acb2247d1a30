"""The instruction set, defined once as data.

Opcodes and other enumerations are Amaranth :class:`~amaranth.lib.enum.Enum` types with a shape;
each instruction format, the DMA descriptor, the post-processing parameter entry and the
performance record are :class:`~amaranth.lib.data.StructLayout` built from :class:`Field` lists
that also carry the documentation. The RTL decoder uses these layouts (``Signal(layout)``), the
compiler encodes with :func:`make` / :func:`encode_record`, the ISA simulator decodes with
:func:`decode_insn` / :func:`decode_record`, and ``docs/isa.md`` is generated from them
(:mod:`arch.isa_doc`). The package's modules: ``constants`` (sizes, widths, arithmetic),
``launch``, ``enums``, ``record`` (Field / Format / Leaf), ``formats`` (every record and
instruction, and the token flags), ``codec`` (encode / decode).

Adding an instruction: add an :class:`Opcode` member (``enums.py``), add its :class:`Format` to
:data:`FORMATS` (``formats.py``, fields with docs), then implement it in the ISA simulator and
the RTL; the encoder, decoder, assembler, disassembler and docs follow from the format.

Program model (VTA-style decoupled access/execute): instructions are fetched from DRAM in order
and dispatched to three queues - LOAD, COMPUTE, STORE - that run concurrently. Ordering between
queues comes only from dependency tokens: each instruction may pop a token from its neighbour
queues before it starts and push one when it is done. LOAD's neighbour is COMPUTE ("next");
COMPUTE's are LOAD ("prev") and STORE ("next"); STORE's is COMPUTE ("prev"). A LOAD is done
for its queue once it has requested its lines (the next instruction starts while its data is on
the way, so the DRAM latency of a run of LOADs overlaps); its token is pushed when its last line
has landed, and a SYNC in the LOAD queue waits until every line has: a token from the LOAD queue
still means that everything before it is in. A LOAD or STORE unit reads its queue head's
descriptor from the table ahead - while the instruction before it runs, or while the head waits
for its tokens (``descriptor_read_cycles``) - so a descriptor table is read-only while a program
runs.

Errors: a program aligned to other than 16 bytes, or a descriptor table not 64-byte aligned or
reaching past DRAM, stops with DRAM_RANGE at instruction 0 before anything runs. Every other
error names the instruction that raised it; instruction k is decoded and checked (opcode, SYNC
queue, dependency flags) when dispatch reaches it, i.e. after instruction k-1 found room in its
queue - so a program that deadlocks with a full queue stops with DEADLOCK even if an illegal
instruction follows. DEADLOCK names the instruction the first of LOAD, COMPUTE, STORE waits at
for a token, else the one dispatch cannot place.
"""

# ruff: noqa: F401 - the package's names, as one module had them
from arch.isa.codec import (
    Instruction,
    bytes_to_words,
    decode_insn,
    decode_record,
    descriptor,
    encode_record,
    make,
    words_to_bytes,
)
from arch.isa.constants import (
    ARITHMETIC,
    DESC_BITS,
    DESC_BYTES,
    DESC_INDEX_BITS,
    DESC_LOOPS,
    DRAM_ADDR_BITS,
    GATE_ADDR_BITS,
    INSN_BITS,
    INSN_BYTES,
    INSN_INDEX_BITS,
    INT32_MAX,
    INT32_MIN,
    ITER_BITS,
    LAUNCH_BITS,
    LOCAL_ADDR_BITS,
    M_BITS,
    MAX_SHIFT,
    PARAM_ENTRY_BYTES,
    TABLE_ENTRIES,
    IsaError,
)
from arch.isa.enums import ENUMS, ErrorCode, Mem, NormMode, Opcode, PoolMode, Queue
from arch.isa.formats import (
    ACCUM,
    CONV,
    CONV_KERNEL_MAX,
    CONV_STRIDE_MAX,
    DEP_FLAGS,
    DEPS,
    DEPS_PATHS,
    DESCRIPTOR,
    DW_KERNEL_MAX,
    DWCONV,
    END,
    FORMATS,
    FRAME_CYCLES,
    GEMM,
    INSTRUCTION,
    LOAD,
    LOOP,
    NORM,
    PARAM_ENTRY,
    PERF,
    PERF_COUNTERS,
    PERF_RECORD,
    POOL,
    RECORDS,
    STORE,
    SYNC,
    Token,
    descriptor_beats,
    descriptor_read_cycles,
    dwconv_cycles,
    gemm_cycles,
    gemm_drain_cycles,
    line_bytes,
    norm_cycles,
    queue_of,
    table_lines,
    window_span,
)
from arch.isa.launch import Launch
from arch.isa.record import Field, Format, Leaf

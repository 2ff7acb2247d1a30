"""Small programs of SYNCs and LOADs laid out in a DRAM image, with at most one defect, for
holding the RTL to the ISA simulator on how (and where) a program stops: a directed list of the
cases that once disagreed, and a hypothesis strategy of random valid and invalid programs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from arch import isa
from arch.asm import Program
from arch.config import AccelConfig
from arch.isa import Launch
from sim.backends.base import DeviceResult, DeviceRun
from sim.backends.isa_machine import IsaSimError, Machine

PROGRAM_AT = 0x100
DESCS_AT = 0x1000
DATA_AT = 0x2000
IMAGE_BYTES = 0x3000
#: Token flags each queue may carry (a neighbour exists on that side).
VALID_FLAGS = {
    isa.Queue.LOAD: ("pop_next", "push_next"),
    isa.Queue.COMPUTE: ("pop_prev", "pop_next", "push_prev", "push_next"),
    isa.Queue.STORE: ("pop_prev", "push_prev"),
}
FLAG_BITS = {"pop_prev": 4, "pop_next": 5, "push_prev": 6, "push_next": 7}


@dataclass
class Case:
    """A program (instruction words) with its descriptors, data and launch registers."""

    name: str
    words: list[int]
    descs: list[dict] = field(default_factory=list)
    insn_offset: int = 0  # added to PROGRAM_AT (a misaligned program)
    insn_base: int | None = None  # a program outside the image: launched there, not placed
    desc_base: int = DESCS_AT
    desc_count: int | None = None  # default: len(descs)
    seed: int = 0

    def image(self) -> tuple[np.ndarray, Launch]:
        image = np.zeros(IMAGE_BYTES, dtype=np.uint8)
        image[DATA_AT:] = np.random.default_rng(self.seed).integers(0, 256, IMAGE_BYTES - DATA_AT)
        code = isa.words_to_bytes(self.words, isa.INSN_BYTES)
        at = PROGRAM_AT + self.insn_offset
        image[at : at + len(code)] = np.frombuffer(code, np.uint8)
        table = Program([], self.descs).desc_bytes()
        image[DESCS_AT : DESCS_AT + len(table)] = np.frombuffer(table, np.uint8)
        count = len(self.descs) if self.desc_count is None else self.desc_count
        return image, Launch(
            at if self.insn_base is None else self.insn_base, self.desc_base, count
        )


def word(opcode: str, deps: str = "", **fields) -> int:
    return isa.make(opcode, deps, **fields).encode()


def with_flag(value: int, flag: str) -> int:
    return value | 1 << FLAG_BITS[flag]


END = word("end")


def act_load(config: AccelConfig, lines: int, local: int = 0, dram: int = DATA_AT) -> dict:
    return isa.descriptor("ACT", local, dram, [(lines, config.act_line_bytes, 1)])


def isa_outcome(config: AccelConfig, case: Case) -> tuple[str, int | None]:
    """``("done", None)`` or (error code name, instruction index) on the ISA simulator."""
    image, launch = case.image()
    dram = np.zeros(config.dram_bytes, dtype=np.uint8)
    dram[: image.size] = image
    try:
        Machine(config, dram).run(launch)
    except IsaSimError as exc:
        return exc.code.name, exc.insn_index
    return "done", None


def rtl_outcome(result: DeviceResult) -> tuple[str, int | None]:
    assert not result.timeout, "the RTL neither finished nor stopped"
    return ("done", None) if result.done else (result.error_code, result.error_index)


def device_run(case: Case, max_cycles: int = 20_000) -> DeviceRun:
    image, launch = case.image()
    return DeviceRun(image, launch, max_cycles=max_cycles, dump_size=IMAGE_BYTES)


def directed(config: AccelConfig) -> dict[str, tuple[Case, tuple[str, int | None]]]:
    """The cases of issue #19 and neighbours, with the outcome both must give."""
    depth = config.queue_depth
    blocked = word("sync", "pop_prev", queue="COMPUTE")  # waits for a token nobody pushes
    filler = word("sync", queue="COMPUTE")
    illegal = 13
    cases = [
        (Case("sync_load_without_descriptors", [word("sync", queue="LOAD"), END]), ("done", None)),
        (Case("only_end", [END]), ("done", None)),
        (Case("end_with_pop", [with_flag(END, "pop_prev")]), ("BAD_FIELD", 0)),
        (
            Case("end_with_push", [word("sync", queue="LOAD"), with_flag(END, "push_next")]),
            ("BAD_FIELD", 1),
        ),
        (
            Case("misaligned_program", [word("sync", queue="STORE"), END], insn_offset=4),
            ("DRAM_RANGE", 0),
        ),
        # Launch registers at the ends of their 32 bits (the next case sets them back: every
        # bit of each register and of its copies in the units rises and falls).
        (
            Case("descriptor_count_at_its_end", [END], desc_count=(1 << isa.LAUNCH_BITS) - 1),
            ("DRAM_RANGE", 0),
        ),
        (
            Case(
                "descriptor_table_at_the_end_of_the_address_space",
                [END],
                desc_base=(1 << isa.LAUNCH_BITS) - isa.DESC_BYTES,
                desc_count=1,
            ),
            ("DRAM_RANGE", 0),
        ),
        (
            Case(
                "program_at_the_end_of_the_address_space",
                [END],
                insn_base=(1 << isa.LAUNCH_BITS) - isa.INSN_BYTES,
            ),
            ("DRAM_RANGE", 0),
        ),
        (
            Case(
                "descriptor_table_past_dram",
                [word("sync", queue="STORE"), END],
                desc_base=config.dram_bytes - isa.DESC_BYTES,
                desc_count=2,
            ),
            ("DRAM_RANGE", 0),
        ),
        (
            Case("misaligned_descriptor_table", [END], desc_base=DESCS_AT + 16, desc_count=1),
            ("DRAM_RANGE", 0),
        ),
        # The COMPUTE queue holds `depth` instructions, the waiting head included: one more
        # and dispatch never reaches the illegal word after it.
        (
            Case("deadlock_then_illegal", [blocked, *[filler] * depth, illegal, END]),
            ("DEADLOCK", 0),
        ),
        (
            Case("room_then_illegal", [blocked, *[filler] * (depth - 1), illegal, END]),
            ("ILLEGAL_OPCODE", depth),
        ),
        # Several queues wait: the RTL names LOAD's instruction first, then COMPUTE's.
        (
            Case(
                "three_queues_wait",
                [
                    blocked,
                    word("sync", "pop_prev", queue="STORE"),
                    word("sync", "pop_next", queue="LOAD"),
                    END,
                ],
            ),
            ("DEADLOCK", 2),
        ),
        # A bad launch stops at instruction 0 whatever it is, also a compute word or an
        # undecodable one: nothing is fetched.
        *(
            (
                Case(
                    f"bad_launch_before_{name}", [first, END], desc_base=DESCS_AT + 16, desc_count=1
                ),
                ("DRAM_RANGE", 0),
            )
            for name, first in (
                ("gemm", word("gemm")),
                ("accum", word("accum")),
                ("pool", word("pool")),
                ("dwconv", word("dwconv")),
                ("conv", word("conv")),
                ("an_illegal_word", illegal),
            )
        ),
        # Each opcode that pops a token can be the one a deadlock names (it waits before it
        # looks at its other fields).
        *(
            (
                Case(f"{op}_waits_for_a_token_nobody_pushes", [word(op, "pop_prev"), END]),
                ("DEADLOCK", 0),
            )
            for op in ("gemm", "accum", "pool", "dwconv", "conv", "store", "perf")
        ),
    ]
    return {case.name: (case, expected) for case, expected in cases}


# ---- random programs --------------------------------------------------------------------------

DEFECTS = (
    "none",
    "illegal_opcode",
    "sync_queue_3",
    "flag_without_neighbour",
    "end_flag",
    "descriptor_index",
    "local_range",
    "dram_range",
    "misaligned_program",
    "descriptor_table",
)


@st.composite
def programs(draw: st.DrawFn, config: AccelConfig) -> Case:
    """A random program of SYNCs (any queue) and LOADs (valid descriptors) with random valid
    token flags (so some deadlock), optionally balanced by trailing pushes, and at most one
    defect of :data:`DEFECTS` at a random place."""
    queues = list(isa.Queue)
    ndescs = draw(st.integers(1, 4))
    descs = [
        act_load(config, draw(st.integers(1, 4)), draw(st.integers(0, config.act_lines - 4)))
        for _ in range(ndescs)
    ]
    body: list[int] = []
    for _ in range(draw(st.integers(0, 12))):
        queue = draw(st.sampled_from(queues))
        flags = draw(st.sets(st.sampled_from(VALID_FLAGS[queue]), max_size=2))
        if queue is isa.Queue.LOAD and draw(st.booleans()):
            body.append(
                word("load", ",".join(sorted(flags)), desc=draw(st.integers(0, ndescs - 1)))
            )
        else:
            body.append(word("sync", ",".join(sorted(flags)), queue=queue.name))
    if draw(st.booleans()):  # push every token some queue pops without a matching push
        body += _balance(body)
    defect = draw(st.sampled_from(DEFECTS))
    case = Case(f"random-{defect}", body + [END], descs, seed=draw(st.integers(0, 2**16)))
    at = draw(st.integers(0, len(body)))  # the defect replaces or precedes instruction `at`
    if defect == "illegal_opcode":
        case.words.insert(at, draw(st.sampled_from([0, 11, 12, 13, 14, 15])))
    elif defect == "sync_queue_3":
        case.words.insert(at, word("sync", queue="LOAD") | 3 << 8)
    elif defect == "flag_without_neighbour":
        queue, flag = draw(
            st.sampled_from(
                [
                    ("LOAD", "pop_prev"),
                    ("LOAD", "push_prev"),
                    ("STORE", "pop_next"),
                    ("STORE", "push_next"),
                ]
            )  # fmt: skip
        )
        case.words.insert(at, with_flag(word("sync", queue=queue), flag))
    elif defect == "end_flag":
        case.words[-1] = with_flag(END, draw(st.sampled_from(list(FLAG_BITS))))
    elif defect == "descriptor_index":
        case.words.insert(at, word("load", desc=draw(st.integers(ndescs, ndescs + 3))))
    elif defect == "local_range":
        case.descs.append(act_load(config, 4, config.act_lines - draw(st.integers(1, 3))))
        case.words.insert(at, word("load", desc=len(case.descs) - 1))
    elif defect == "dram_range":
        far = config.dram_bytes - draw(st.integers(1, 3)) * config.act_line_bytes
        case.descs.append(act_load(config, 4, 0, far))
        case.words.insert(at, word("load", desc=len(case.descs) - 1))
    elif defect == "misaligned_program":
        case.insn_offset = draw(st.integers(1, isa.INSN_BYTES - 1))
    elif defect == "descriptor_table":
        if draw(st.booleans()):
            case.desc_base = DESCS_AT + draw(st.integers(1, isa.DESC_BYTES - 1))
        else:
            case.desc_base = config.dram_bytes - isa.DESC_BYTES * draw(st.integers(0, 2))
            case.desc_count = len(case.descs) + 3
    return case


def _balance(body: list[int]) -> list[int]:
    """SYNCs that push, for every channel, the tokens its pops take beyond its pushes."""
    flags = {name: bit for name, bit in FLAG_BITS.items()}
    owed: dict[tuple[isa.Queue, str], int] = {}
    for value in body:
        insn = isa.decode_insn(value)
        queue = insn.queue
        assert queue is not None
        for side in ("prev", "next"):
            if value >> flags[f"pop_{side}"] & 1:  # a token from that neighbour
                src = _neighbour(queue, side)
                back = "next" if side == "prev" else "prev"
                owed[(src, back)] = owed.get((src, back), 0) + 1
            if value >> flags[f"push_{side}"] & 1:
                owed[(queue, side)] = owed.get((queue, side), 0) - 1
    extra = []
    for (queue, side), count in sorted(owed.items(), key=lambda kv: (kv[0][0].value, kv[0][1])):
        extra += [word("sync", f"push_{side}", queue=queue.name)] * max(count, 0)
    return extra


def _neighbour(queue: isa.Queue, side: str) -> isa.Queue:
    return isa.Queue(queue.value - 1 if side == "prev" else queue.value + 1)

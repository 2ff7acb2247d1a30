"""Assembler and disassembler: text round trips and errors with line numbers."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arch import asm, isa
from tests.unit.arch.test_isa_encoding import leaf_values


@st.composite
def programs(draw):
    insns = []
    for _ in range(draw(st.integers(0, 12))):
        fmt = draw(st.sampled_from(list(isa.FORMATS.values())))
        values = draw(leaf_values(fmt))
        insns.append(isa.decode_insn(isa.encode_record(fmt, values)))
    descs = [draw(leaf_values(isa.DESCRIPTOR)) for _ in range(draw(st.integers(0, 4)))]
    return asm.Program(insns, descs)


@settings(max_examples=100, deadline=None)
@given(program=programs())
def test_disassemble_assemble_round_trip(program):
    text = asm.disassemble(program)
    again = asm.assemble(text)
    assert again.insn_bytes() == program.insn_bytes()
    assert again.desc_bytes() == program.desc_bytes()
    binary = asm.Program.from_bytes(program.insn_bytes(), program.desc_bytes())
    assert asm.disassemble(binary) == text


def test_listing_shows_names_and_notes():
    program = asm.assemble(
        """
        .desc mem=WGT dram_base=0x40 loops[3].count=4 loops[3].dram_stride=4 loops[3].local_stride=1
        load desc=0 +push_next          ; weights
        pool act_addr=3 m=2 window=9 n_iter=1 mode=MAX +pop_prev
        end
        """
    )
    text = asm.disassemble(program, notes={1: "layer1.0.maxpool"})
    assert ".desc mem=WGT dram_base=0x40" in text
    assert "load desc=0 +push_next  ; #0" in text
    assert "mode=MAX accumulate=0 +pop_prev  ; #1 layer1.0.maxpool" in text


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("load desc=0\ngemm m=70000", "line 2: gemm.m = 70000 is out of range 0..4095"),
        ("nop", "line 1: unknown mnemonic 'nop'"),
        ("load desc=0 +pop_later", "line 1: unknown flag(s) ['pop_later']"),
        ("end\n.desc mem=SRAM", "line 2: descriptor.mem = 'SRAM' is not one of"),
        ("store desc", "line 1: expected field=value or +flag, got 'desc'"),
        (".desc mem=ACT +push_next", "line 1: descriptors take no +flags"),
    ],
)
def test_errors_give_line_numbers(source, message):
    with pytest.raises(asm.AsmError) as info:
        asm.assemble(source)
    assert message in str(info.value)

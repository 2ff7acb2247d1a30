"""ISA encoding: round trips for every format over all field values, clear errors, docs current."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arch import isa, isa_doc

ALL_FORMATS = [*isa.FORMATS.values(), *isa.RECORDS]


def leaf_values(fmt: isa.Format):
    """A strategy for a full set of in-range flattened field values of ``fmt``."""
    fields = {}
    for leaf in fmt.leaves:
        if leaf.path == "opcode":
            fields[leaf.path] = st.just(fmt.opcode)
        elif leaf.enum is not None:
            fields[leaf.path] = st.sampled_from(list(leaf.enum))
        else:
            fields[leaf.path] = st.integers(leaf.lo, leaf.hi)
    return st.fixed_dictionaries(fields)


def nested(fmt: isa.Format, flat: dict) -> dict:
    """Flattened paths -> the nested dict Amaranth's Layout.const takes."""
    out: dict = {}
    for path, value in flat.items():
        node = out
        parts = path.replace("[", ".").replace("]", "").split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return _lists(out)


def _lists(node):
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_lists(node[str(i)]) for i in range(len(node))]
    return {k: _lists(v) for k, v in node.items()}


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=lambda f: f.name)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_round_trip_and_agreement_with_amaranth(fmt, data):
    values = data.draw(leaf_values(fmt))
    word = isa.encode_record(fmt, values)
    assert 0 <= word < (1 << fmt.bits)
    decoded = isa.decode_record(fmt, word)
    assert decoded == {k: values[k] for k in decoded}
    assert isa.encode_record(fmt, decoded) == word
    # The same bits as Amaranth's own encoding of the layout the RTL uses.
    assert fmt.layout.const(nested(fmt, values)).as_bits() == word
    if fmt.opcode is not None:
        insn = isa.decode_insn(word)
        assert insn.opcode is fmt.opcode
        assert insn.encode() == word


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=lambda f: f.name)
def test_out_of_range_names_the_field(fmt):
    for leaf in fmt.leaves:
        if leaf.enum is not None:
            continue
        for bad in (leaf.hi + 1, leaf.lo - 1):
            with pytest.raises(isa.IsaError) as info:
                isa.encode_record(fmt, {leaf.path: bad})
            message = str(info.value)
            assert f"{fmt.name}.{leaf.path} = {bad}" in message
            assert f"{leaf.lo}..{leaf.hi}" in message


def test_other_bad_values():
    with pytest.raises(isa.IsaError, match=r"descriptor.mem = 'DRAM' is not one of ACT, WGT"):
        isa.encode_record(isa.DESCRIPTOR, {"mem": "DRAM"})
    with pytest.raises(isa.IsaError, match=r"pool.mode = 7 is not one of MAX, SUM"):
        isa.make("pool", mode=7)
    with pytest.raises(isa.IsaError, match=r"unknown field.*'rows'"):
        isa.make("gemm", rows=3)
    with pytest.raises(isa.IsaError, match=r"gemm.m must be an integer, not 2.5"):
        isa.make("gemm", m=2.5)
    with pytest.raises(isa.IsaError, match="4 loop levels, 5 were given"):
        isa.descriptor("ACT", 0, 0, [(1, 0, 0)] * 5)


@pytest.mark.parametrize("opcode", [0, 12, 13, 15])
def test_illegal_opcodes(opcode):
    with pytest.raises(isa.IsaError, match=f"instruction 7: illegal opcode {opcode}"):
        isa.decode_insn(opcode | (0xABC << 40), index=7)


def test_every_instruction_fits_and_union_matches():
    for fmt in isa.FORMATS.values():
        assert fmt.layout.size <= isa.INSN_BITS
        assert isa.INSTRUCTION.size >= fmt.layout.size
        assert fmt.leaves[0].path == "opcode" and fmt.leaves[0].offset == 0
    assert isa.DESCRIPTOR.layout.size <= isa.DESC_BITS
    assert isa.PARAM_ENTRY.layout.size <= isa.PARAM_ENTRY_BYTES * 8


def test_make_sets_dependency_flags():
    insn = isa.make("gemm", "pop_prev, push_next", m=3, k_iter=1, n_iter=1)
    assert (insn["deps.pop_prev"], insn["deps.push_next"], insn["deps.pop_next"]) == (1, 1, 0)
    assert insn.queue is isa.Queue.COMPUTE
    assert isa.make("sync", queue="STORE").queue is isa.Queue.STORE
    assert isa.make("end").queue is None


@pytest.mark.parametrize("flag", ["pop_prev", "pop_next", "push_prev", "push_next"])
def test_each_token_sets_its_own_deps_bit(flag):
    """A Token is the DEPS field of its name: given to make, it sets that bit and no other (the
    bit positions decoded from the raw word, not through the Token)."""
    token = isa.Token[flag.upper()]
    word = isa.make("sync", (token,), queue=isa.Queue.LOAD).encode()
    deps = isa.FORMATS[isa.Opcode.SYNC].leaf_by_path
    set_bits = {name for name in deps if name.startswith("deps.") and word >> deps[name].offset & 1}
    assert set_bits == {f"deps.{flag}"}
    assert [t.value for t in isa.Token] == [f.name for f in isa.DEPS.fields]


def test_docs_are_current():
    assert isa_doc.DOC_PATH.read_text() == isa_doc.render(), "run `python -m arch.isa_doc`"

"""Guard bands (sim/runtime/guard.py): canaries fill the gaps between regions and a tail after the
image;
a write outside every region is reported with its address and the regions around it, and a
network run whose store lands one line past its tensor fails on the ISA simulator."""

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.runtime.guard import TAIL_BYTES, guard_image
from sim.runtime.run import RunError, run
from tests.network.test_models_rtl import seeded_input

REGIONS = [("a", 0x40, 100), ("b", 0x100, 64)]


def test_canaries_fill_exactly_the_gaps_and_the_tail():
    image = np.zeros(0x140, dtype=np.uint8)
    image[0x40:0xA4] = np.arange(100)
    out, guard = guard_image(image, REGIONS, seed=1)
    assert out.size == guard.size == 0x140 + TAIL_BYTES
    np.testing.assert_array_equal(out[0x40:0xA4], np.arange(100))
    inside = np.zeros(out.size, dtype=bool)
    inside[0x40:0xA4] = inside[0x100:0x140] = True
    np.testing.assert_array_equal(np.sort(guard.addresses), np.flatnonzero(~inside))
    assert len(set(guard.pattern.tolist())) > 200  # random bytes, not a constant fill
    again, _ = guard_image(image, REGIONS, seed=1)
    np.testing.assert_array_equal(again, out)  # seeded: reproducible
    assert guard.check(out) is None


@pytest.mark.parametrize(
    ("address", "where"),
    [
        (0xA4, "0 bytes past 'a' (0x40..0xa4), before 'b' (0x100)"),
        (0xFF, "91 bytes past 'a' (0x40..0xa4), before 'b' (0x100)"),
        (0x140, "0 bytes past 'b' (0x100..0x140), past the end of the image (0x140)"),
        (0x3F, "before 'a' (0x40)"),
    ],
)
def test_a_changed_canary_names_its_address_and_neighbours(address, where):
    out, guard = guard_image(np.zeros(0x140, dtype=np.uint8), REGIONS)
    written = out.copy()
    written[0x40:0xA4] ^= 0xFF  # inside a region: allowed
    assert guard.check(written) is None
    written[address] ^= 0x01
    message = guard.check(written)
    assert message is not None and message.startswith(
        f"1 guard bytes changed; first at 0x{address:x}"
    )
    assert message.endswith(where)


def test_a_write_past_the_bytes_read_back_is_reported_first():
    out, guard = guard_image(np.zeros(0x140, dtype=np.uint8), REGIONS)
    assert guard.check(out, (0, -1)) is None
    far = 0x140 + (1 << 20)
    message = guard.check(out, (16, far))
    assert message == (
        f"16 bytes written past the {guard.size} bytes read back; first at 0x{far:x}, "
        f"{far - 0x140} bytes past 'b' (0x100..0x140), past the end of the image (0x140)"
    )


def test_data_outside_every_region_is_refused():
    image = np.zeros(0x140, dtype=np.uint8)
    image[0xB0] = 7
    with pytest.raises(ValueError, match="data at 0xb0, outside every region"):
        guard_image(image, REGIONS)


def shift_store(exe, tensor: str, lines: int):
    """Move the last store into ``tensor`` by ``lines`` DRAM lines (a compiler bug made on
    purpose)."""
    [program] = exe.programs
    start, end = (
        program.tensors[tensor].addr,
        program.tensors[tensor].addr + program.tensors[tensor].nbytes,
    )
    found = []
    for n in range(program.launch.desc_count):
        at = program.launch.desc_base + n * isa.DESC_BYTES
        word = int.from_bytes(program.image[at : at + isa.DESC_BYTES].tobytes(), "little")
        desc = isa.decode_record(isa.DESCRIPTOR, word)
        if desc["mem"] is isa.Mem.ACC and start <= desc["dram_base"] < end:
            found.append((desc["dram_base"], at, desc))
    assert found, f"no store into {tensor}"
    _, at, desc = max(found, key=lambda f: f[0])
    desc["dram_base"] += lines * exe.config.cols
    word = isa.encode_record(isa.DESCRIPTOR, desc)
    program.image[at : at + isa.DESC_BYTES] = np.frombuffer(
        word.to_bytes(isa.DESC_BYTES, "little"), dtype=np.uint8
    )


@pytest.mark.parametrize(
    ("tensor", "where"),
    [("act1.out", "before 'act2.out'"), ("logits", "past the end of the image")],
)
def test_a_store_one_line_past_its_tensor_fails_the_run(tensor, where):
    exe = compile_model("mlp", PRESETS["tiny"], seed=3).executable
    x = seeded_input(exe, seed=2)
    assert run(exe, x, "isa").bit_exact
    shift_store(exe, tensor, 1)
    with pytest.raises(RunError, match="isa: device0 wrote outside its memory map") as info:
        run(exe, x, "isa")
    assert f"past '{tensor}'" in str(info.value) and where in str(info.value)


def test_a_store_a_mib_past_the_image_fails_the_run():
    """Far past every canary: the ISA simulator counts the bytes it writes there."""
    exe = compile_model("mlp", PRESETS["tiny"], seed=3).executable
    x = seeded_input(exe, seed=2)
    [program] = exe.programs
    shift_store(exe, "logits", (1 << 20) // exe.config.cols)
    with pytest.raises(RunError, match="isa: device0 wrote outside its memory map") as info:
        run(exe, x, "isa")
    logits = program.tensors["logits"]
    end = logits.addr + logits.nbytes  # the last tensor: the image ends with it
    assert str(info.value).endswith(
        f"{logits.nbytes} bytes written past the {end + TAIL_BYTES} bytes read back; first at "
        f"0x{logits.addr + (1 << 20):x}, {(1 << 20) - logits.nbytes} bytes past 'logits' "
        f"(0x{logits.addr:x}..0x{end:x}), past the end of the image (0x{end:x})"
    )

"""Damaged and edited executables (issue 44): each refused with one line naming the file and
the member or field - a flipped byte in a compressed member, an edit whose array digests were
recomputed but not the file's, and (digests all recomputed) a region, launch or PERF base that
does not match the image - never an internal error, never a run with a wrong report."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

import zoo
from arch import executable
from arch.config import PRESETS
from arch.executable import ExecutableError
from compiler.export import to_executable
from compiler.frontend import compile_front
from compiler.passes import run_back
from sim.app.cli import main
from tests.executable_files import DIGEST, manifest_of, rewrite, with_manifest

TINY = PRESETS["tiny"]
# the ISA's instruction, descriptor and PERF record sizes (docs/isa.md)
INSN_BYTES, DESC_BYTES, PERF_BYTES = 16, 64, 128


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graph = compile_front(zoo.build("cnn", image_size=16, seed=3), seed=3)
    exe = to_executable(run_back(graph, TINY), "cnn")
    return executable.save(exe, tmp_path_factory.mktemp("exe") / "cnn.cosim")


def refused(path: Path, *names: str) -> str:
    """The one-line refusal of ``path``, which names the file and ``names``."""
    with pytest.raises(ExecutableError) as info:
        executable.load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and "\n" not in text, text
    for name in names:
        assert name in text, (name, text)
    return text


def array_of(path: Path, member: str) -> np.ndarray:
    with zipfile.ZipFile(path) as archive:
        return np.load(io.BytesIO(archive.read(member)), allow_pickle=False)


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def step0(info: dict) -> dict:
    return info["steps"][0]


# --- damage: no digest recomputed --------------------------------------------------------------


def test_flipped_bytes_in_compressed_members_name_the_member(saved: Path, tmp_path: Path) -> None:
    """Once 12 of 300 flips escaped as zlib's 'invalid distance too far back' (exit 4)."""
    data = saved.read_bytes()
    rng = np.random.default_rng(44)
    inflate_errors = 0
    with zipfile.ZipFile(saved) as archive:
        infos = archive.infolist()
    for info in infos:
        local = info.header_offset
        name_len = int.from_bytes(data[local + 26 : local + 28], "little")
        extra_len = int.from_bytes(data[local + 28 : local + 30], "little")
        start = local + 30 + name_len + extra_len
        for at in rng.integers(start, start + info.compress_size, 3):
            damaged = bytearray(data)
            damaged[at] ^= int(rng.integers(1, 256))
            path = tmp_path / "flip.cosim"
            path.write_bytes(bytes(damaged))
            try:
                executable.load(path)
            except ExecutableError:
                inflate_errors += "Error -3" in refused(path, info.filename)
                continue
            # loaded: the flip was in bits deflate ignores (the last byte's padding), so the
            # member inflates to what was written (its CRC matches)
            with zipfile.ZipFile(path) as archive, zipfile.ZipFile(saved) as good:
                assert archive.read(info.filename) == good.read(info.filename)
    assert inflate_errors  # the class the issue found is among them


def test_a_member_of_another_file_or_none_is_refused(saved: Path, tmp_path: Path) -> None:
    info = manifest_of(saved)
    image = step0(info)["image"]
    weights = next(m for n in info["reference"]["nodes"] for m in n["params"].values())
    cases = [
        ({DIGEST: None}, f"member {DIGEST} is missing"),
        ({DIGEST: b"0" * 63 + b"\n"}, "not 64 lowercase hex digits"),
        ({"arrays/99.npy": npy(np.zeros(4, np.uint8))}, "'arrays/99.npy' is not part of"),
        ({image: (b := zipfile.ZipFile(saved)).read(weights), weights: b.read(image)},
         "does not match its SHA-256"),  # two members swapped
    ]  # fmt: skip
    for members, message in cases:
        refused(rewrite(saved, tmp_path / "m.cosim", members, sealed=False), message)


@pytest.mark.parametrize("edit", ["weights", "zero point", "config", "half the image"])
def test_edits_with_array_digests_recomputed_are_refused_as_edited(
    saved: Path, tmp_path: Path, edit: str
) -> None:
    """Once these ran and reported an RTL mismatch (exit 1) or an accelerator error (exit 3)."""
    info = manifest_of(saved)
    members: dict[str, bytes | None] = {}
    if edit == "weights":
        member = next(n["params"]["weight"] for n in info["reference"]["nodes"]
                      if "weight" in n["params"])  # fmt: skip
        weight = array_of(saved, member).copy()
        weight.flat[0] ^= 0x21
        members[member] = npy(weight)
    elif edit == "zero point":
        name = step0(info)["outputs"][0]
        info["reference"]["tensors"][name]["zero_point"] = 3
    elif edit == "config":
        info["config"]["dram_latency"] += 1
    else:
        image = array_of(saved, step0(info)["image"]).copy()
        image[image.size // 2 :] = 0
        members[step0(info)["image"]] = npy(image)
    members["manifest.json"] = json.dumps(info).encode()
    edited = rewrite(saved, tmp_path / "edited.cosim", members, root=False)
    refused(edited, f"do not match its digest ({DIGEST})", "recompile")
    if edit == "weights":  # the file's digest is what refuses it: recomputed, the edit loads
        assert executable.load(rewrite(saved, tmp_path / "resealed.cosim", members))


# --- edits with every digest recomputed: the structural checks ---------------------------------


def test_a_region_whose_size_was_edited_is_refused(saved: Path, tmp_path: Path) -> None:
    """Once ``ValueError: the image has data at 0x..., outside every region`` (exit 4)."""
    info = manifest_of(saved)
    region = next(r for r in step0(info)["regions"] if r[0].endswith("#weights"))
    image = array_of(saved, step0(info)["image"])
    name, addr, size = region
    first = addr + size // 2 + int(np.flatnonzero(image[addr + size // 2 : addr + size])[0])

    def shrink(i: dict) -> None:
        next(r for r in step0(i)["regions"] if r[0] == name)[2] = size // 2

    path = with_manifest(saved, tmp_path / "region.cosim", shrink)
    refused(path, "step 0", f"the image has data at 0x{first:x}, outside every region")


@pytest.mark.parametrize(
    ("field", "moved", "unit"), [("insn_base", 4, INSN_BYTES), ("insn_base", 8, INSN_BYTES),
                                 ("desc_base", 16, DESC_BYTES)]
)  # fmt: skip
def test_a_misaligned_program_or_descriptor_base_is_refused(
    saved: Path, tmp_path: Path, field: str, moved: int, unit: int
) -> None:
    """Once ``IsaError: instruction 0: illegal opcode 0`` (exit 4)."""

    def move(info: dict) -> None:
        step0(info)["launch"][field] += moved

    path = with_manifest(saved, tmp_path / "base.cosim", move)
    refused(path, "step 0", f"launch {field}", f"must be a multiple of {unit} bytes")


def test_an_all_zero_image_or_an_illegal_opcode_is_refused(saved: Path, tmp_path: Path) -> None:
    info = manifest_of(saved)
    member, base = step0(info)["image"], step0(info)["launch"]["insn_base"]
    image = array_of(saved, member)
    zero = rewrite(saved, tmp_path / "zero.cosim", {member: npy(np.zeros_like(image))})
    refused(zero, "step 0", "must end with their one END; there is none")
    illegal = image.copy()
    illegal[base + 3 * INSN_BYTES] &= 0xF0  # instruction 3's opcode (its low 4 bits): 0
    path = rewrite(saved, tmp_path / "illegal.cosim", {member: npy(illegal)})
    refused(path, "step 0", "instruction 3: illegal opcode 0")
    shifted = with_manifest(
        saved, tmp_path / "shifted.cosim",
        lambda i: step0(i)["launch"].update(insn_base=base + INSN_BYTES),
    )  # fmt: skip
    refused(shifted, "step 0", "END")


def test_a_moved_perf_base_is_refused(saved: Path, tmp_path: Path) -> None:
    """Once a run with every layer at 0 cycles and 'DMA-bound 338232569087701352448%' (exit 0)."""
    base = step0(manifest_of(saved))["perf_base"]
    path = with_manifest(
        saved, tmp_path / "perf.cosim", lambda i: step0(i).update(perf_base=base + 64)
    )
    refused(path, "step 0", f"perf_base 0x{base + 64:x}", f"its PERF writes 0x{base:x}")


def test_perf_records_outside_their_region_are_refused(saved: Path, tmp_path: Path) -> None:
    info = manifest_of(saved)
    layers = len(step0(info)["layers"])

    def shrink(i: dict) -> None:
        next(r for r in step0(i)["regions"] if r[0] == "perf")[2] = (layers - 1) * PERF_BYTES

    path = with_manifest(saved, tmp_path / "perf_region.cosim", shrink)
    refused(path, "step 0", "PERF records", "inside no region")


def test_the_cli_refuses_damaged_and_edited_files_with_exit_2(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = step0(manifest_of(saved))["perf_base"]
    perf = with_manifest(
        saved, tmp_path / "p.cosim", lambda i: step0(i).update(perf_base=base + 64)
    )
    edited = with_manifest(
        saved, tmp_path / "e.cosim", lambda i: i["config"].update(dram_latency=1), root=False
    )
    for path, message in ((perf, "perf_base"), (edited, "do not match its digest")):
        code = main(["--backend", "isa", "--bundle", str(path), "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and "Traceback" not in err and len(errors) == 1, err
        assert str(path) in errors[0] and message in errors[0], errors[0]
        assert not (tmp_path / "o").exists()


def test_an_early_end_is_refused(saved: Path, tmp_path: Path) -> None:
    info = manifest_of(saved)
    member, base = step0(info)["image"], step0(info)["launch"]["insn_base"]
    image = array_of(saved, member).copy()
    image[base + 5 * INSN_BYTES] = (image[base + 5 * INSN_BYTES] & 0xF0) | 8  # END's opcode: 8
    path = rewrite(saved, tmp_path / "end.cosim", {member: npy(image)})
    refused(path, "step 0", "must end with their one END; instruction 5 is END")


def test_bad_array_digests_and_oversized_archives_are_refused(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = step0(manifest_of(saved))["image"]

    def digest(info: dict) -> None:
        info["arrays"][image]["sha256"] = "ABC"

    path = with_manifest(saved, tmp_path / "sha.cosim", digest, sealed=False)
    refused(path, f"{image} has sha256 'ABC'; expected 64 lowercase hex digits")
    from arch.executable import reader

    image_bytes = array_of(saved, image).size
    monkeypatch.setattr(reader, "ARCHIVE_MAX_BYTES", image_bytes - 1)
    refused(saved, f"its arrays hold more than {image_bytes - 1} bytes together")


def test_a_member_longer_in_the_zip_than_in_fact_is_refused(saved: Path, tmp_path: Path) -> None:
    """The zip's central directory says the digest member inflates to more than it holds."""
    data = bytearray(saved.read_bytes())
    at = data.rfind(DIGEST.encode()) - 46  # the name follows the 46-byte central header
    assert data[at : at + 4] == b"PK\x01\x02"
    data[at + 24 : at + 28] = (100).to_bytes(4, "little")
    path = tmp_path / "longer.cosim"
    path.write_bytes(bytes(data))
    refused(path, f"member {DIGEST}")

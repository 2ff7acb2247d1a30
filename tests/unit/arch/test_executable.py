"""The executable file: save/load round trip (the loaded executable runs exactly like the
original), config and version checks, unreadable files, and files made to attack the reader
(paths outside the archive, oversized or wrongly typed arrays, altered data, inconsistent
addresses) - each refused with a clear error, never run."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

import zoo
from arch import executable, listing
from arch.config import PRESETS, AccelConfig
from arch.executable import ExecutableError, HostStep
from compiler.errors import CompileError
from compiler.export import device_program, to_executable
from compiler.frontend import compile_front
from compiler.passes import run_back
from compiler.plan import Plan
from sim.runtime.run import run
from tests.executable_files import DIGEST, manifest_of, reseal, rewrite, with_manifest

TINY = PRESETS["tiny"]


@pytest.fixture(scope="module")
def plan() -> Plan:
    graph = compile_front(zoo.build("cnn", image_size=16, seed=3), seed=3)
    return run_back(graph, TINY)


@pytest.fixture(scope="module")
def exe(plan: Plan) -> executable.Executable:
    return to_executable(plan, "cnn")


@pytest.fixture
def saved(exe: executable.Executable, tmp_path: Path) -> Path:
    return executable.save(exe, tmp_path / "sub" / "cnn.cosim")


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def image_member(path: Path) -> str:
    return manifest_of(path)["steps"][0]["image"]


def test_archive_holds_only_json_and_plain_arrays(exe, saved: Path) -> None:
    with zipfile.ZipFile(saved) as archive:
        names = archive.namelist()
        assert names[0] == "manifest.json" and names[-1] == DIGEST
        assert all(n.startswith("arrays/") and n.endswith(".npy") for n in names[1:-1])
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in archive.infolist())
        for name in names[1:-1]:  # every array loads without pickle
            np.load(io.BytesIO(archive.read(name)), allow_pickle=False)
        content = {name: archive.read(name) for name in names}
    assert reseal(content) == content  # every digest is the format's, computed independently
    info = manifest_of(saved)
    assert info["format"] == "cosim-executable" and info["format_version"] == 8
    assert info["model"] == "cnn" and AccelConfig.from_dict(info["config"]) == TINY
    assert [s["kind"] for s in info["steps"]] == ["device"] + ["host"] * (len(exe.steps) - 1)
    assert len(info["reference"]["nodes"]) == len(exe.reference.nodes)
    assert set(info["arrays"]) == set(names[1:-1])


def test_round_trip_keeps_everything(exe, saved: Path) -> None:
    loaded = executable.load(saved, TINY)
    assert loaded is not exe and loaded.model == "cnn" and loaded.config == TINY
    [program], [original] = loaded.programs, exe.programs
    np.testing.assert_array_equal(program.image, original.image)
    assert program.image.dtype == np.uint8
    assert (program.launch, program.regions, program.layers, program.tensors) == (
        original.launch,
        original.regions,
        original.layers,
        original.tensors,
    )
    assert (program.inputs, program.outputs, program.perf_base) == (
        original.inputs,
        original.outputs,
        original.perf_base,
    )
    assert [s for s in loaded.steps if isinstance(s, HostStep)] == [
        s for s in exe.steps if isinstance(s, HostStep)
    ]
    assert loaded.reference.tensors == exe.reference.tensors
    for got, want in zip(loaded.reference.nodes, exe.reference.nodes, strict=True):
        assert (got.name, got.op, got.inputs, got.output) == (
            want.name,
            want.op,
            want.inputs,
            want.output,
        )
        assert got.attrs == {
            k: tuple(v) if isinstance(v, list) else v for k, v in want.attrs.items()
        }
        assert got.params.keys() == want.params.keys()
        for key, value in want.params.items():
            assert got.params[key].dtype == value.dtype
            np.testing.assert_array_equal(got.params[key], value)
    assert listing.render(loaded) == listing.render(exe)


def test_loaded_executable_runs_exactly_like_the_original(exe, saved: Path) -> None:
    loaded = executable.load(saved)
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal(exe.input.shape).astype(np.float32)
        want, got = run(exe, x, "isa"), run(loaded, x, "isa")
        assert got.bit_exact and want.bit_exact
        assert got.cycles == want.cycles and got.counters == want.counters
        assert [(la.name, la.cycles, la.counters) for la in got.layers] == [
            (la.name, la.cycles, la.counters) for la in want.layers
        ]
        for name, value in want.outputs.items():
            np.testing.assert_array_equal(got.outputs[name], value)


def test_a_wrong_reference_is_caught(exe, saved: Path, tmp_path: Path) -> None:
    """The reference in the file is what the run is checked against: a changed weight there
    makes the run fail its check (the check reads the file's reference, not the compiler's)."""
    info = manifest_of(saved)
    node = next(n for n in info["reference"]["nodes"] if "weight" in n["params"])
    member = node["params"]["weight"]
    with zipfile.ZipFile(saved) as archive:
        weight = np.load(io.BytesIO(archive.read(member)))
    weight = weight.copy()
    weight.flat[0] = np.int8(weight.flat[0] ^ 0x40)
    info["arrays"][member]["sha256"] = hashlib.sha256(weight.tobytes()).hexdigest()
    path = rewrite(
        saved,
        tmp_path / "wrong.cosim",
        {"manifest.json": json.dumps(info).encode(), member: npy(weight)},
    )
    x = np.random.default_rng(0).standard_normal(exe.input.shape).astype(np.float32)
    result = run(executable.load(path), x, "isa")
    assert not result.bit_exact and result.first_mismatch.name == node["name"]


def test_a_different_config_is_refused_naming_both(saved: Path) -> None:
    other = PRESETS["default"]
    with pytest.raises(ExecutableError) as info:
        executable.load(saved, other)
    text = str(info.value)
    assert TINY.name in text and other.name in text and str(saved) in text
    near = AccelConfig(**{**TINY.to_dict(), "dram_latency": TINY.dram_latency + 1})
    with pytest.raises(ExecutableError, match=near.name):  # any field differs: refused
        executable.load(saved, near)


def test_wrong_format_or_version_is_refused(saved: Path, tmp_path: Path) -> None:
    # versions 1-4 carry no digest: refused, asking for a recompile; so are unknown ones
    for version in (1, 4, 9, 0):
        path = with_manifest(
            saved, tmp_path / f"v{version}.cosim", lambda i, v=version: i.update(format_version=v)
        )
        with pytest.raises(
            ExecutableError,
            match=rf"format version {version}; this tool reads versions \(5, 6, 7, 8\) - recompile",
        ):
            executable.load(path)
    # 5, 6 and 7 are 8 without the map/tokens views, constants and grouped products: a file of
    # 5, 6 or 7 (this one has none) still loads
    for version in (5, 6, 7):
        path = with_manifest(
            saved, tmp_path / f"v{version}.cosim", lambda i, v=version: i.update(format_version=v)
        )
        old, new = executable.load(path), executable.load(saved)
        assert [s.name for s in old.steps] == [s.name for s in new.steps]
        assert [(n.name, n.op) for n in old.reference.nodes] == [
            (n.name, n.op) for n in new.reference.nodes
        ]
    # Not "format 1, this tool reads 1": the type is named; true (== 1 in Python) is no integer.
    for version, said in ((None, "NoneType None"), ("1", "str '1'"), (True, "bool True")):
        path = with_manifest(
            saved, tmp_path / f"t{version}.cosim", lambda i, v=version: i.update(format_version=v)
        )
        with pytest.raises(ExecutableError, match=f"'format_version' is {said}, not an integer"):
            executable.load(path)
    path = with_manifest(saved, tmp_path / "fmt.cosim", lambda i: i.update(format="neff"))
    with pytest.raises(ExecutableError, match="is not a cosim-executable file"):
        executable.load(path)


def test_unreadable_files_are_refused(saved: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    data = saved.read_bytes()
    cases = {
        "garbage": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "text": b"not an executable\n",
    }
    for name, blob in cases.items():
        path = tmp_path / f"{name}.cosim"
        path.write_bytes(blob)
        with pytest.raises(ExecutableError, match=str(path)):
            executable.load(path)
    with pytest.raises(ExecutableError, match="no such executable"):
        executable.load(tmp_path / "missing.cosim")
    with pytest.raises(ExecutableError, match="no such executable"):
        executable.load(tmp_path)  # a directory
    image = image_member(saved)
    members = {
        "no_manifest": ({"manifest.json": None}, "no manifest.json"),
        "no_image": ({image: None}, "missing from the archive"),
        "manifest_garbage": ({"manifest.json": b"{not json"}, "not valid JSON"),
        "manifest_binary": ({"manifest.json": b"\xff\xfe\x00\xd8garbage"}, "not valid JSON"),
        "manifest_list": ({"manifest.json": b"[1, 2]"}, "not a cosim-executable"),
        "image_garbage": ({image: b"garbage"}, "not a readable .npy"),
    }
    for name, (changes, message) in members.items():
        path = rewrite(saved, tmp_path / f"{name}.cosim", changes)
        with pytest.raises(ExecutableError, match=message):
            executable.load(path)

    # a flipped byte inside a compressed member: the zip CRC (or inflate) catches it
    with zipfile.ZipFile(saved) as archive:
        info = archive.getinfo(image)
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    damaged = bytearray(data)
    damaged[start + info.compress_size // 2] ^= 0xFF
    path = tmp_path / "crc.cosim"
    path.write_bytes(bytes(damaged))
    with pytest.raises(ExecutableError, match=str(path)):
        executable.load(path)


@pytest.mark.parametrize(
    "member",
    ["../../etc/passwd", "/etc/passwd", "arrays/../manifest.json", "manifest.json", "arrays/x.npy"],
)
def test_manifest_pointing_outside_the_archive_is_refused(saved, tmp_path, member) -> None:
    def change(info: dict) -> None:
        info["steps"][0]["image"] = member
        info["arrays"][member] = {"dtype": "uint8", "shape": [4], "sha256": "0"}

    path = with_manifest(saved, tmp_path / "outside.cosim", change)
    with pytest.raises(ExecutableError, match="not an array member"):
        executable.load(path)


def test_undeclared_member_is_refused(saved: Path, tmp_path: Path) -> None:
    image = image_member(saved)
    path = with_manifest(saved, tmp_path / "undeclared.cosim", lambda i: i["arrays"].pop(image))
    with pytest.raises(ExecutableError, match=f"member '{image}' is not part of an executable"):
        executable.load(path)


def test_oversized_arrays_are_refused(saved: Path, tmp_path: Path) -> None:
    image = image_member(saved)
    # a member whose .npy header says more than the manifest declares is not read
    bomb = np.zeros(64 << 20, np.uint8)
    path = rewrite(saved, tmp_path / "bomb.cosim", {image: npy(bomb)})
    with pytest.raises(ExecutableError, match=rf"member {image} is 67108992 bytes, over its limit"):
        executable.load(path)
    # a declared and stored image larger than the config's DRAM
    big = np.zeros(TINY.dram_bytes + 1, np.uint8)

    def declare(info: dict) -> None:
        info["arrays"][image].update(
            shape=[big.size], sha256=hashlib.sha256(big.tobytes()).hexdigest()
        )

    path = with_manifest(saved, tmp_path / "big0.cosim", declare)
    path = rewrite(path, tmp_path / "big.cosim", {image: npy(big)})
    with pytest.raises(ExecutableError, match="more bytes than the config's DRAM"):
        executable.load(path)


def test_wrong_dtypes_are_refused(saved: Path, tmp_path: Path) -> None:
    image = image_member(saved)
    # declared as another dtype than the image must have
    path = with_manifest(
        saved, tmp_path / "d1.cosim", lambda i: i["arrays"][image].update(dtype="float32")
    )
    with pytest.raises(ExecutableError, match="dtype 'float32'; expected one of uint8"):
        executable.load(path)
    # a dtype outside the allowed set (objects would need pickle)
    path = with_manifest(
        saved, tmp_path / "d2.cosim", lambda i: i["arrays"][image].update(dtype="object")
    )
    with pytest.raises(ExecutableError, match="dtype 'object'"):
        executable.load(path)
    # the stored array is not what the manifest declares
    path = rewrite(saved, tmp_path / "d3.cosim", {image: npy(np.zeros(8, np.int16))})
    with pytest.raises(ExecutableError, match="the manifest declares uint8"):
        executable.load(path)
    # a pickled object array is never unpickled
    path = rewrite(saved, tmp_path / "d4.cosim", {image: npy(np.array([{"a": 1}], dtype=object))})
    with pytest.raises(ExecutableError, match="is object .* the manifest declares uint8"):
        executable.load(path)


def test_altered_array_is_refused(saved: Path, tmp_path: Path) -> None:
    image = image_member(saved)
    with zipfile.ZipFile(saved) as archive:
        data = np.load(io.BytesIO(archive.read(image))).copy()
    data[len(data) // 2] ^= 1
    path = rewrite(saved, tmp_path / "altered.cosim", {image: npy(data)}, sealed=False)
    with pytest.raises(ExecutableError, match="SHA-256: the file was damaged or altered"):
        executable.load(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda i: i["steps"][0]["tensors"][i["steps"][0]["inputs"][0]].update(addr=-16),
         "outside the program's memory"),
        (lambda i: i["steps"][0]["regions"].append(["evil", 2**40, 16]),
         "outside the config's DRAM"),
        (lambda i: i["steps"][0]["layers"][0].update(insn_range=[0, 10**6]),
         "instructions .* outside"),
        (lambda i: i["steps"][0]["layers"][0].update(perf_index=10**9),
         "PERF record of layer 0 .* outside"),
        (lambda i: i["steps"][0]["launch"].update(insn_base=-1), "launch register insn_base"),
        (lambda i: i["steps"][0].update(instructions=10**9), "overrun the image"),
        (lambda i: i["steps"][0]["layers"][0].update(output="nowhere"), "has no place in DRAM"),
        (lambda i: i["steps"][0]["tensors"][i["steps"][0]["inputs"][0]].update(layout="nchw"),
         "layout 'nchw'"),
        (lambda i: i["steps"].append({"kind": "host", "name": "h", "op": "exec", "inputs": [],
                                      "outputs": []}), "host op 'exec'"),
        (lambda i: i["steps"].append({"kind": "shell"}), "kind 'shell'"),
        (lambda i: i["reference"]["nodes"][0].update(op="eval"), "op 'eval' is not one of"),
        (lambda i: i["reference"]["nodes"][0].update(inputs=["ghost"]), "'ghost' is not in"),
        (lambda i: i["reference"]["nodes"].reverse(), "is not produced before it"),
        (lambda i: i["steps"][0].update(outputs=[]), "is produced by no step"),
        (lambda i: i.pop("config"), "field 'config' is missing"),
        (lambda i: i["config"].update(rows=3), "config it was compiled for is invalid"),
        (lambda i: i["steps"][0].update(name=7), "field 'name' must be str"),
    ],
)  # fmt: skip
def test_inconsistent_manifest_is_refused(saved, tmp_path, change, message) -> None:
    path = with_manifest(saved, tmp_path / "bad.cosim", change)
    with pytest.raises(ExecutableError, match=message):
        executable.load(path)


def test_export_refuses_an_unemitted_plan(plan: Plan) -> None:
    with pytest.raises(CompileError, match="not been emitted"):
        device_program(Plan(plan.config, plan.graph))


def test_no_pickle_in_the_project() -> None:
    """Nothing pickles or unpickles: the compiler, simulators and hardware never name it, and
    the executable reader loads arrays with ``allow_pickle=False`` only."""
    root = Path(__file__).resolve().parents[3]
    for folder in ("compiler", "sim", "hdl_gen"):
        for path in (root / folder).rglob("*.py"):
            assert "pickle" not in path.read_text(), path
    for path in (root / "arch").rglob("*.py"):
        text = path.read_text()
        assert "import pickle" not in text and "allow_pickle=True" not in text, path


# --- the launch registers and the reference graph's op table, as the file format uses them ---


def test_launch_registers_are_named_once() -> None:
    from dataclasses import fields

    from arch.isa import IsaError, Launch
    from sim.backends.harness import LAUNCH_PORTS

    assert Launch.FIELDS == tuple(f.name for f in fields(Launch)) == LAUNCH_PORTS
    launch = Launch.from_dict({"insn_base": 16, "desc_base": 64, "desc_count": 3})
    assert (launch.insn_base, launch.desc_base, launch.desc_count) == (16, 64, 3)
    assert launch.as_dict() == {"insn_base": 16, "desc_base": 64, "desc_count": 3}
    good = {"insn_base": 0, "desc_base": 0, "desc_count": 0}
    for data, message in [
        ({**good, "desc_count": True}, "desc_count must be an integer"),
        ({**good, "insn_base": 2**32}, "insn_base must be an integer in 0..2"),
        ({**good, "extra": 1}, r"must be exactly \['insn_base', 'desc_base', 'desc_count'\]"),
        ({"insn_base": 0}, "must be exactly"),
        ([0, 0, 0], "not list"),
    ]:
        with pytest.raises(IsaError, match=message):
            Launch.from_dict(data)
    with pytest.raises(IsaError, match="insn_base"):
        Launch(True, 0, 0)


def test_op_table_is_what_the_compiler_verifies_and_writes(exe) -> None:
    """The reference's table of attrs, params and arity per op agrees with the compiler's
    verifier (compiler/ir.py) and with the params the compiler writes."""
    from arch.reference import (
        ARITY_OF_OP,
        ATTRS_OF_OP,
        PARAMS_OF_OP,
        REFERENCE_OPS,
        RESIDUAL_PARAMS,
    )
    from compiler import ir, op_rules

    assert set(PARAMS_OF_OP) == set(ATTRS_OF_OP) == set(REFERENCE_OPS) == set(ir.OPS)
    for op in REFERENCE_OPS:
        assert ATTRS_OF_OP[op] == op_rules.ATTRS[op], op
        assert ARITY_OF_OP[op] == op_rules.ARITY[op], op
    for node in exe.reference.nodes:
        wanted = {**PARAMS_OF_OP[node.op]}
        if node.op in ("conv", "gemm") and len(node.inputs) == 2:
            wanted |= RESIDUAL_PARAMS
        assert {k: v.dtype.name for k, v in node.params.items()} == wanted, node.name
    assert any(len(node.inputs) == 2 for node in exe.reference.nodes)  # a residual is covered


def _mutated(exe, change):
    import copy

    graph = copy.deepcopy(exe.reference)
    change(graph, {node.name: node for node in graph.nodes})
    return graph


# What the reference does without the check: "crash" (an exception mid-run), "shape" (values of
# other shapes than the graph declares, which the run compares or reshapes), "range" (an out of
# range multiplier or clamp, refused by the reference ops), None (runs, but the node is not what
# the compiler writes: a kernel attr the weight contradicts, an attr or param too many or few).
@pytest.mark.parametrize(
    ("change", "message", "without"),
    [
        (lambda g, n: n["conv1"].params.pop("bias"),
         r"params \['clamp', 'mult', 'shift', 'weight'\] must be exactly", "crash"),
        (lambda g, n: n["conv3"].params.pop("res_mult"), "must be exactly .*'res_mult'", "crash"),
        (lambda g, n: n["fc"].params.update(weight=n["fc"].params["weight"].astype(np.int32)),
         "param 'weight' must be int8, not int32", None),
        (lambda g, n: n["fc"].params.update(weight=n["fc"].params["weight"].T.copy()),
         r"param 'weight' has shape \(32, 10\); expected \(N, 32\)", "crash"),
        (lambda g, n: n["conv2"].params.update(bias=n["conv2"].params["bias"][:-1]),
         r"param 'bias' has shape \(31,\); expected \(32,\)", "crash"),
        (lambda g, n: n["conv1"].attrs.update(kernel=(5, 5)), "weight' has shape .* expected",
         None),
        (lambda g, n: n["conv1"].attrs.update(stride=(0, 1)),
         "attr 'stride' must be 2 integers >= 1", "crash"),
        (lambda g, n: n["conv1"].attrs.update(group=2), "does not fit input", "crash"),
        (lambda g, n: n["conv1"].attrs.update(group=True), "attr 'group' must be an integer",
         "crash"),
        (lambda g, n: n["conv1"].attrs.pop("act"), "attrs .* must be exactly", "crash"),
        (lambda g, n: n["conv1"].attrs.update(act="table"), "must be exactly .*'table'", "crash"),
        (lambda g, n: (n["conv1"].attrs.update(act="table"),
                       n["conv1"].params.update(table=np.zeros(255, np.int8))),
         r"param 'table' has shape \(255,\); expected \(256,\)", "range"),
        (lambda g, n: n["conv1"].attrs.update(act="tanh"), "attr 'act' 'tanh' is not one of", None),
        (lambda g, n: n["conv2"].params["shift"].__setitem__(0, 63),
         "param 'shift' must be in 0..62", "range"),
        (lambda g, n: n["conv2"].params["mult"].__setitem__(0, 2**31),
         "param 'mult' must be in the int32", "range"),
        (lambda g, n: n["fc"].params["clamp"].__setitem__(slice(None), [5, 4]),
         r"clamp \[5, 4\]", "range"),
        (lambda g, n: g.tensors.update(logits=executable.TensorSpec("logits", (1, 5), 0.1)),
         r"output 'logits' has shape \(1, 5\); the op gives \(1, 10\)", "shape"),
        (lambda g, n: g.tensors.update(
            **{"relu2.out": executable.TensorSpec("relu2.out", (1, 32, 4, 4), 0.1)}),
         r"output 'relu2.out' has shape \(1, 32, 4, 4\); the op gives \(1, 32, 8, 8\)", "shape"),
        (lambda g, n: g.tensors.update(input=executable.TensorSpec("input", (1, 4, 16, 16), 0.1)),
         "does not fit input", "crash"),
        (lambda g, n: g.tensors.update(logits=executable.TensorSpec("logits", (1, 10), None)),
         "output 'logits' has no scale", None),
        (lambda g, n: n["maxpool"].params.update(mult=np.ones(1, np.int64)),
         "params .* must be exactly", None),
        (lambda g, n: n["avgpool"].params.update(shift=np.ones(2, np.int64)),
         r"'shift' has shape \(2,\)", "crash"),
    ],
)  # fmt: skip
def test_check_graph_refuses_what_evaluate_cannot_run(exe, change, message, without) -> None:
    from arch.reference import ReferenceError, check_graph, evaluate

    check_graph(exe.reference)  # the compiler's graph passes
    graph = _mutated(exe, change)
    with pytest.raises(ReferenceError, match=message):
        check_graph(graph)
    # independently: what the reference does on it without the check
    x = np.random.default_rng(0).integers(-128, 128, graph.tensors["input"].shape, np.int8)
    try:
        values = evaluate(graph, x)
    except ValueError as exc:
        assert without in ("crash", "range"), exc
        return
    except (KeyError, IndexError):
        assert without == "crash"
        return
    shapes_differ = any(values[t].shape != graph.tensors[t].shape for t in values)
    assert shapes_differ == (without == "shape") and without in (None, "shape")


# --- files made to crash the reader or the run (review findings) --------------------------------


def dram_end_of(step: dict) -> int:
    """What a device program's memory is, computed here from its manifest entry."""
    with_image = [step["image_bytes"]] if "image_bytes" in step else []
    return max([*with_image, *(addr + size for _name, addr, size in step["regions"])])


@pytest.fixture(scope="module")
def hosted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An executable with a host region (an LRN, named like PyTorch names nodes) between two
    device programs, and a Softmax host step at the end."""
    from onnx import TensorProto, helper, numpy_helper

    from compiler.compile import compile_model

    rng = np.random.default_rng(0)
    inits = {
        "w1": rng.normal(0, 0.2, (8, 3, 3, 3)).astype(np.float32),
        "w2": rng.normal(0, 0.2, (8, 8, 3, 3)).astype(np.float32),
        "w3": rng.normal(0, 0.2, (8 * 8 * 8, 10)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("LRN", ["c1"], ["s1"], name="/lrn/LRN", size=3),
        helper.make_node("Conv", ["s1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Flatten", ["r2"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "w3"], ["y0"], name="fc"),
        helper.make_node("Softmax", ["y0"], ["y"], name="sm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder = tmp_path_factory.mktemp("hosted")
    onnx_path = folder / "hosted.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    compiled = compile_model(onnx_path, TINY)
    return executable.save(compiled.executable, folder / "hosted.cosim")


def test_hosted_executable_loads_with_its_host_step_names(hosted: Path) -> None:
    loaded = executable.load(hosted)
    kinds = [(type(s).__name__, s.name) for s in loaded.steps]
    assert kinds == [
        ("DeviceProgram", "device0"),
        ("HostStep", "/lrn/LRN"),  # a host step's name is shown, never a path: '/' is fine
        ("DeviceProgram", "device1"),
        ("HostStep", "sm"),
    ]


def _image_bytes(info: dict, index: int) -> int:
    return info["arrays"][info["steps"][index]["image"]]["shape"][0]


def _end(info: dict, index: int) -> int:
    step = info["steps"][index]
    return max([_image_bytes(info, index), *(a + n for _name, a, n in step["regions"])])


def _tensor(info: dict, name: str) -> dict:
    return info["steps"][0]["tensors"][name]


def _layer(info: dict, index: int) -> dict:
    return info["steps"][0]["layers"][index]


def _node(info: dict, name: str) -> dict:
    return next(n for n in info["reference"]["nodes"] if n["name"] == name)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # entries that are not objects (were AttributeError)
        (lambda i: i["arrays"].update({image_of(i): 5}),
         "entry of arrays/0.npy must be an object with dtype, shape and sha256, not 5"),
        (lambda i: i["steps"][0]["layers"].insert(0, 5), "step 0 layer 0 must be an object"),
        (lambda i: i["steps"][0]["layers"].append([1, 2]), "layer 6 must be an object, not \\[1,"),
        (lambda i: i["steps"].insert(0, 5), "step 0 must be an object, not 5"),
        (lambda i: i["reference"]["nodes"].insert(1, "x"), "reference node 1 must be an object"),
        (lambda i: i["reference"]["tensors"].update(x=5), "reference tensor 'x' must be an object"),
        (lambda i: i["steps"][0]["tensors"].update(x=[]), "tensor 'x' must be an object, not"),
        (lambda i: i["steps"][0].update(launch=[0, 0, 0]), "field 'launch' must be dict"),
        # True is no integer (loaded before)
        (lambda i: i["steps"][0]["launch"].update(desc_count=True), "desc_count must be an int"),
        (lambda i: _layer(i, 0)["tiling"].update(k_group=True), "tiling must be null or an object"),
        (lambda i: _layer(i, 0).update(macs=True), "field 'macs' must be int, not True"),
        (lambda i: _layer(i, 0).update(insn_range=[False, True]), "insn_range must be a list of 2"),
        (lambda i: i["steps"][0]["regions"].append(["x", True, 4]), "region 'x' must be a list"),
        (lambda i: _tensor(i, "relu1.out").update(h=True), "field 'h' must be int, not True"),
        (lambda i: _tensor(i, "input").update(kernel=[True, 3]), "kernel must be a list of 2"),
        (lambda i: i["reference"]["tensors"]["input"].update(shape=[True, 3, 16, 16]),
         "shape must be a list of 4 integers"),
        (lambda i: i["reference"]["tensors"]["input"].update(scale=True),
         "scale must be a positive number or null, not True"),
        (lambda i: i["arrays"][image_of(i)].update(shape=[True]), "bad shape \\[True\\]"),
        (lambda i: i["steps"][0]["launch"].update(extra=1), "launch registers must be exactly"),
    ],
)  # fmt: skip
def test_wrongly_typed_entries_are_refused(saved, tmp_path, change, message) -> None:
    path = with_manifest(saved, tmp_path / "typed.cosim", change)
    with pytest.raises(ExecutableError, match=message):
        executable.load(path)


def image_of(info: dict) -> str:
    return info["steps"][0]["image"]


@pytest.mark.parametrize(
    ("shape", "dtype", "message"),
    [
        # refused before any member is read: over the limit for any array (1 GiB)
        ([10**30], "uint8", "more bytes than the limit for an array"),  # was OverflowError
        ([2**62, 4], "uint8", "more bytes than the limit"),  # np.prod wrapped to 0
        ([2**31, 2**31, 4], "uint8", "more bytes than the limit"),
        ([TINY.dram_bytes + 1], "uint8", "image .* more bytes than the config's DRAM"),
        ([-1], "uint8", "bad shape"),
    ],
)
def test_huge_declared_images_are_refused(saved, tmp_path, shape, dtype, message) -> None:
    path = with_manifest(
        saved, tmp_path / "huge.cosim", lambda i: i["arrays"][image_of(i)].update(shape=shape)
    )
    with pytest.raises(ExecutableError, match=message):
        executable.load(path)


@pytest.mark.parametrize("shape", [[10**30], [2**62, 4], [2**15, 2**15], [2**16, 2**14, 2]])
def test_huge_declared_params_are_refused(saved, tmp_path, shape) -> None:
    """Any array but an image is capped at ARRAY_MAX_BYTES (1 GiB): 2**15 x 2**15 int32 is 4 GiB."""

    def change(info: dict) -> None:
        member = _node(info, "conv1")["params"]["bias"]
        info["arrays"][member].update(shape=shape)

    path = with_manifest(saved, tmp_path / "huge.cosim", change)
    with pytest.raises(
        ExecutableError, match=r"arrays/\d+\.npy is declared .* more bytes than the"
    ):
        executable.load(path)


def npy_header(shape: tuple, descr: str = "|u1", fortran: bool = False) -> bytes:
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": fortran, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def test_npy_headers_are_read_before_the_data(saved: Path, tmp_path: Path) -> None:
    """A header claiming a terabyte array was allocated before it was read (MemoryError)."""
    image = image_member(saved)
    path = rewrite(saved, tmp_path / "tb.cosim", {image: npy_header((2**40,)) + b"\0" * 64})
    with pytest.raises(ExecutableError, match=r"is uint8 \(1099511627776,\); the manifest"):
        executable.load(path)


def test_npy_members_must_be_exactly_header_and_data(saved: Path, tmp_path: Path) -> None:
    info = manifest_of(saved)
    image = image_member(saved)
    with zipfile.ZipFile(saved) as archive:
        blob = archive.read(image)
        value = np.load(io.BytesIO(blob))
    size = info["arrays"][image]["shape"][0]
    cases = {
        "trailing": (blob + b"\0" * 100, f"is {len(blob) + 100} bytes; its 128-byte header"),
        "short": (blob[:-1], f"is {len(blob) - 1} bytes"),
        "fortran": (npy_header((size,), fortran=True) + value.tobytes(), "in Fortran order"),
        "big_endian": (npy_header((size,), ">u2") + b"", "is >u2"),
    }
    for name, (member, message) in cases.items():
        path = rewrite(saved, tmp_path / f"{name}.cosim", {image: member})
        with pytest.raises(ExecutableError, match=message):
            executable.load(path)
    # the trailing bytes were loaded before: the loader took what np.load returned
    assert "trailing" in cases


def claim_size(path: Path, member: str, claimed: int) -> None:
    """Make the zip's central directory say ``member`` inflates to ``claimed`` bytes."""
    data = bytearray(path.read_bytes())
    at = data.rfind(member.encode()) - 46  # the name follows the 46-byte central header
    assert data[at : at + 4] == b"PK\x01\x02"
    data[at + 24 : at + 28] = claimed.to_bytes(4, "little")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("member", ["manifest.json", "image"])
def test_members_lying_about_their_size_are_not_inflated(saved, tmp_path, member) -> None:
    """A small member that says it holds little but inflates to 128 MiB is never inflated
    beyond what it says (the zip's CRC check then fails): the reader's memory stays small."""
    import tracemalloc

    name = image_member(saved) if member == "image" else member
    with zipfile.ZipFile(saved) as archive:
        honest = archive.read(name)
    padding = b" " if member == "manifest.json" else b"\0"
    members = {name: honest + padding * (128 << 20)}
    path = rewrite(saved, tmp_path / "liar.cosim", members, zipfile.ZIP_DEFLATED)
    del members
    assert path.stat().st_size < 2 << 20
    claim_size(path, name, len(honest))
    tracemalloc.start()
    try:
        with pytest.raises(ExecutableError, match="CRC"):
            executable.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # tiling: exactly the keys the compiler writes (the run reads them)
        (lambda i: _layer(i, 0).update(tiling={"rows_per_tile": 1}),
         "tiling must be null or an object of exactly rows_per_tile, n_blocks, k_group, estimate"),
        (lambda i: _layer(i, 0)["tiling"].update(extra=1), "tiling must be null or an object"),
        (lambda i: _layer(i, 0)["tiling"].update(n_blocks=-1), "tiling must be null or an object"),
        # PERF records: record i of layer i, inside the program's memory
        (lambda i: _layer(i, 0).update(perf_index=-1), "PERF record -1; layer i writes record i"),
        (lambda i: _layer(i, 5).update(perf_index=1000), "PERF record of layer 5 .* outside the "
         "program's memory"),
        # tensors and descriptors inside the program's memory (image and regions)
        (lambda i: _tensor(i, "logits").update(addr=_end(i, 0) - 4),
         "tensor 'logits' spans .* outside the program's memory"),
        (lambda i: i["steps"][0]["launch"].update(desc_count=2**20),
         "1048576 descriptors at .* overrun the image"),
        # DRAM tensors against their graph tensors
        (lambda i: _tensor(i, "input").update(channels=2), "logical_channels 3 > channels 2"),
        (lambda i: _tensor(i, "input").update(h=15), "im2col of .* is 16x16 rows of 3 channels, "
         "not 15x16 of 3"),
        (lambda i: _tensor(i, "input").update(channels=26), "26 channels hold no 3x3x3 rows"),
        (lambda i: _tensor(i, "relu1.out").update(h=8), "8x16 pixels of 16 channels do not hold"),
        (lambda i: _tensor(i, "relu1.out").update(w=8, h=32),
         "32x8 pixels of 16 channels; its graph tensor is"),
        (lambda i: _tensor(i, "logits").update(logical_channels=9), "of 9 channels do not hold"),
        (lambda i: _tensor(i, "input").update(addr=_tensor(i, "input")["addr"] + 16),
         "tensor 'input' at 0x.* lies in no region"),
        (lambda i: _tensor(i, "relu1.out").update(layout="im2col", kernel=[1, 1], stride=[1, 1],
                                                   pads=[0, 0, 0, 0]),
         "only an input the host writes is im2col"),
        # graph tensors
        (lambda i: i["reference"]["tensors"]["input"].update(shape=[1, 3, 16]),
         "input 'input' must be \\(1, C, H, W\\), not \\(1, 3, 16\\)"),
        (lambda i: i["reference"]["tensors"]["input"].update(shape=[2, 3, 16, 16]), "batch 1"),
        (lambda i: i["reference"]["tensors"]["logits"].update(shape=[1, 5]),
         "output 'logits' has shape \\(1, 5\\); the op gives \\(1, 10\\)"),
        (lambda i: i["reference"]["tensors"]["input"].update(shape=[1, 4, 16, 16]),
         "does not fit input"),
        (lambda i: i["reference"]["tensors"]["input"].pop("scale"), "field 'scale' is missing"),
        (lambda i: i["reference"]["tensors"]["input"].update(scale=float("inf")),
         "scale must be a positive number or null, not inf"),
        (lambda i: i["reference"]["tensors"]["input"].update(scale=None), "has no scale"),
        # reference nodes: params and attrs as the op needs them
        (lambda i: _node(i, "conv1")["params"].pop("weight"), "node 'conv1' \\(conv\\): params"),
        (lambda i: _node(i, "fc")["params"].update(weight=_node(i, "fc")["params"]["bias"]),
         "param 'weight' must be int8, not int32"),
        (lambda i: _node(i, "conv1")["attrs"].update(act="tanh"), "attr 'act' 'tanh'"),
        (lambda i: _node(i, "conv1")["attrs"].pop("dilation"), "attrs .* must be exactly"),
        (lambda i: _node(i, "conv1").update(output="input"), "already an input or node output"),
        # layers against the graph
        (lambda i: _layer(i, 1).update(output=_layer(i, 0)["output"]), "is written twice"),
        (lambda i: _layer(i, 0).update(op="gemm"),
         "op 'gemm' writing 'relu1.out'; the reference node writing it is 'conv'"),
        (lambda i: _layer(i, 0).update(kind="shell"), "kind 'shell' is not one of gemm, pool"),
        (lambda i: i.update(steps=[]), "no device program"),
    ],
)  # fmt: skip
def test_files_the_run_would_crash_on_are_refused(saved, tmp_path, change, message) -> None:
    path = with_manifest(saved, tmp_path / "crash.cosim", change)
    with pytest.raises(ExecutableError, match=message):
        executable.load(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda i: i["steps"][1].update(outputs=[*i["steps"][1]["outputs"], "y"]),
         "a host step must be the reference nodes of its outputs"),
        (lambda i: i["steps"][1].update(outputs=[]), "a host step must be the reference nodes"),
        (lambda i: i["steps"][3].update(op="host"), "with their op and the inputs"),
        (lambda i: i["steps"][1].update(inputs=[*i["steps"][1]["inputs"], "x"]),
         "the inputs they read from before it"),
        (lambda i: i["steps"][1].update(name="bad\nname"), "must be 1..1000 printable characters"),
        (lambda i: i["steps"][2].update(name="../../evil"), "it names files"),
        (lambda i: i["steps"].insert(3, i["steps"][1]), "output .* is already produced before it"),
        (lambda i: next(n for n in i["reference"]["nodes"] if n["op"] == "host")["attrs"].update(
            feeds=[]), "attr 'feeds' must name one model input per input"),
        (lambda i: next(n for n in i["reference"]["nodes"] if n["op"] == "host")["params"].clear(),
         "params \\[\\] must be exactly \\['model'\\]"),
        (lambda i: next(n for n in i["reference"]["nodes"] if n["op"] == "softmax")["attrs"].update(
            axis=1), "attrs \\['axis'\\] must be exactly \\[\\]"),
    ],
)  # fmt: skip
def test_host_steps_must_be_their_reference_nodes(hosted, tmp_path, change, message) -> None:
    path = with_manifest(hosted, tmp_path / "host.cosim", change)
    with pytest.raises(ExecutableError, match=message):
        executable.load(path)


@pytest.mark.parametrize(
    ("field", "name"),
    [
        ("model", "../../../escaped"),
        ("model", "[/oops]"),
        ("model", ".hidden"),
        ("model", "a/b"),
        ("model", "x" * 129),
        ("model", ""),
        ("step", "../../evil"),
        ("step", "device 0"),
    ],
)
def test_names_that_become_paths_are_refused(saved, tmp_path, field, name) -> None:
    def change(info: dict) -> None:
        if field == "model":
            info["model"] = name
        else:
            info["steps"][0]["name"] = name

    path = with_manifest(saved, tmp_path / "named.cosim", change)
    with pytest.raises(ExecutableError, match="it names files, so it must be"):
        executable.load(path)


def test_path_names() -> None:
    from arch.executable.format import NAME_MAX, is_path_name, path_name

    for good in ("mlp", "resnet18", "device0", "a.b#c:d+e-f_g", "x" * NAME_MAX):
        assert is_path_name(good) and path_name(good) == good
    for bad, made in [("../x", "_._x"), (".hidden", "_hidden"), ("my model (v2)", "my_model__v2_"),
                      ("", "model"), ("x" * 200, "x" * NAME_MAX), ("a/b", "a_b")]:  # fmt: skip
        assert not is_path_name(bad) and path_name(bad) == made and is_path_name(made)


@pytest.mark.parametrize(
    "change",
    [
        lambda i: i.update(model="x" * 100_000),
        lambda i: _layer(i, 0).update(tiling={"k" * 10_000: "\n" * 10_000}),
        lambda i: _layer(i, 0).update(name=list(range(10_000))),
        lambda i: i["steps"][0]["launch"].update({f"r{n}": n for n in range(10_000)}),
        lambda i: i["arrays"][image_of(i)].update(shape=[10**4000]),
        lambda i: i["reference"]["tensors"].update({"t\n" * 10_000: 5}),
        lambda i: _node(i, "conv1")["attrs"].update(act="\n" * 10_000),
    ],
)
def test_errors_are_one_bounded_line(saved, tmp_path, change) -> None:
    path = with_manifest(saved, tmp_path / "long.cosim", change)
    with pytest.raises(ExecutableError) as info:
        executable.load(path)
    text = str(info.value)
    assert "\n" not in text and len(text) < len(str(path)) + 700, text[:2000]


def test_tiling_keys_are_the_compilers() -> None:
    from dataclasses import fields

    from arch.executable.format import TILING_KEYS
    from compiler.plan import Tiling

    assert tuple(f.name for f in fields(Tiling)) == TILING_KEYS


def test_check_graph_bounds_what_the_reference_computes(exe, monkeypatch) -> None:
    """A file cannot make the reference allocate or compute without bound: padded inputs are
    capped at MAX_ELEMENTS, the graph's conv/gemm work at MAX_MACS."""
    from arch import reference
    from arch.reference import ReferenceError, check_graph

    # counted here: output elements x weight elements per output channel, over conv and gemm
    macs = sum(
        int(np.prod(exe.reference.tensors[n.output].shape))
        * int(np.prod(n.params["weight"].shape[1:]))
        for n in exe.reference.nodes
        if n.op in ("conv", "gemm")
    )
    monkeypatch.setattr(reference, "MAX_MACS", macs)
    check_graph(exe.reference)
    monkeypatch.setattr(reference, "MAX_MACS", macs - 1)
    with pytest.raises(ReferenceError, match=f"needs {macs} multiply-accumulates"):
        check_graph(exe.reference)
    monkeypatch.undo()
    graph = _mutated(exe, lambda g, n: n["conv1"].attrs.update(pads=(10**7, 0, 0, 0)))
    with pytest.raises(ReferenceError, match="padded input has .* elements, more than"):
        check_graph(graph)


def _host_node(info: dict) -> dict:
    return next(n for n in info["reference"]["nodes"] if n["op"] == "host")


@pytest.mark.parametrize(
    ("change", "model", "message"),
    [
        (None, b"not an onnx model", "its ONNX model: onnxruntime cannot run it"),
        (lambda i: _host_node(i)["attrs"].update(feeds=["nope"]), None,
         "its ONNX model takes .* the node feeds \\['nope'\\]"),
        (lambda i: _host_node(i)["attrs"].update(fetch="nope"), None, "fetches 'nope'"),
    ],
)  # fmt: skip
def test_host_models_must_run_as_their_nodes_say(hosted, tmp_path, change, model, message) -> None:
    """A host node's model is loaded by onnxruntime when the file is (it was first loaded in
    the middle of the run, and a feed it does not take was a KeyError there)."""
    info = manifest_of(hosted)
    members: dict[str, bytes | None] = {}
    if change is not None:
        change(info)
    if model is not None:
        member = _host_node(info)["params"]["model"]
        array = np.frombuffer(model, np.uint8)
        info["arrays"][member].update(
            shape=[array.size], sha256=hashlib.sha256(array.tobytes()).hexdigest()
        )
        members[member] = npy(array)
    members["manifest.json"] = json.dumps(info).encode()
    path = rewrite(hosted, tmp_path / "model.cosim", members)
    with pytest.raises(ExecutableError, match=message):
        executable.load(path)

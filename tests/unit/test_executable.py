"""The executable bundle: save/load round trip, config and version checks, unreadable files."""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from arch.config import PRESETS, AccelConfig
from arch.reference import evaluate, quantize_input
from compiler import zoo
from compiler.bundle import FORMAT_VERSION, BundleError, load_bundle, save_bundle
from compiler.frontend import compile_front
from compiler.passes import run_back
from compiler.plan import Plan
from sim.run import run

TINY = PRESETS["tiny"]


@pytest.fixture(scope="module")
def plan() -> Plan:
    graph = compile_front(zoo.build("cnn", image_size=16, seed=3), seed=3)
    return run_back(graph, TINY)


@pytest.fixture
def bundle(plan: Plan, tmp_path: Path) -> Path:
    return save_bundle(plan, tmp_path / "sub" / "cnn.bundle", "cnn")


def rewrite(src: Path, dst: Path, **members: bytes | None) -> Path:
    """A copy of the bundle with some members replaced (bytes) or left out (None)."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dst, "w") as new:
        for name in old.namelist():
            data = members.get(name, old.read(name))
            if data is not None:
                new.writestr(name, data)
    return dst


def test_round_trip_keeps_program_image_launch_and_manifest(plan: Plan, bundle: Path) -> None:
    assert bundle.is_file() and zipfile.is_zipfile(bundle)
    with zipfile.ZipFile(bundle) as archive:
        assert sorted(archive.namelist()) == ["dram_image.bin", "manifest.json", "plan.pkl"]
        assert archive.read("dram_image.bin") == plan.image.tobytes()
    loaded, info = load_bundle(bundle, TINY)
    assert loaded is not plan
    assert loaded.program.insn_bytes() == plan.program.insn_bytes()
    assert loaded.program.desc_bytes() == plan.program.desc_bytes()
    np.testing.assert_array_equal(loaded.image, plan.image)
    assert loaded.image.dtype == np.uint8 and loaded.image.flags.writeable
    assert loaded.launch == plan.launch and loaded.regions == plan.regions
    assert loaded.config == TINY

    assert info["format_version"] == FORMAT_VERSION == 1
    assert info["model"] == "cnn"
    assert AccelConfig.from_dict(info["config"]) == TINY
    assert info["config_name"] == TINY.name
    assert info["launch"] == plan.launch
    assert info["memory_map"] == [{"name": n, "addr": a, "bytes": s} for n, a, s in plan.regions]
    assert info["input"] == {
        "name": "input",
        "scale": plan.graph.tensors["input"].scale,
        "layout": "im2col",
    }
    assert [o["name"] for o in info["outputs"]] == plan.graph.outputs
    assert info["instructions"] == len(plan.program.insns)
    assert info["descriptors"] == len(plan.program.descs)
    layers = plan.accel_layers()
    assert [(x["name"], x["op"], x["kind"], x["macs"]) for x in info["layers"]] == [
        (la.name, la.node.op, la.kind, la.macs) for la in layers
    ]
    assert [tuple(x["insn_range"]) for x in info["layers"]] == [la.insn_range for la in layers]
    assert info["layers"][0]["tiling"]["rows_per_tile"] == layers[0].tiling.rows_per_tile
    assert [x["name"] for x in info["layers"]] == [
        "conv1",
        "conv2",
        "maxpool",
        "conv3",
        "avgpool",
        "fc",
    ]
    # without a config the bundle loads too
    again, _ = load_bundle(bundle)
    assert again.config == TINY


def test_loaded_plan_runs_bit_exact(bundle: Path) -> None:
    loaded, _ = load_bundle(bundle, TINY)
    graph = loaded.graph
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)
        result = run(loaded, x, "isa")
        assert result.bit_exact, result.first_mismatch
        assert len(result.layers) == 6
        reference = evaluate(graph, quantize_input(x, graph.tensors["input"].scale))
        logits = reference["logits"].astype(np.float64) * graph.tensors["logits"].scale
        np.testing.assert_allclose(result.outputs["logits"], logits, rtol=1e-6)


def test_a_different_config_is_refused_naming_both(bundle: Path) -> None:
    other = PRESETS["default"]
    with pytest.raises(BundleError) as info:
        load_bundle(bundle, other)
    text = str(info.value)
    assert TINY.name in text and other.name in text and str(bundle) in text
    near = AccelConfig(**{**TINY.to_dict(), "dram_latency": TINY.dram_latency + 1})
    with pytest.raises(BundleError, match=near.name):  # any field differs: refused
        load_bundle(bundle, near)


def test_wrong_format_version_is_refused(bundle: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(bundle) as archive:
        info = json.loads(archive.read("manifest.json"))
    for version in (FORMAT_VERSION + 1, 0, None):
        info["format_version"] = version
        path = rewrite(
            bundle, tmp_path / f"v{version}.bundle", **{"manifest.json": json.dumps(info).encode()}
        )
        with pytest.raises(BundleError, match=f"bundle format {version}"):
            load_bundle(path, TINY)


def test_unreadable_files_raise_bundle_error(bundle: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    data = bundle.read_bytes()
    cases = {
        "garbage": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "text": b"not a bundle\n",
    }
    for name, blob in cases.items():
        path = tmp_path / f"{name}.bundle"
        path.write_bytes(blob)
        with pytest.raises(BundleError, match="not a readable bundle"):
            load_bundle(path, TINY)
    with pytest.raises(BundleError, match="not a readable bundle"):
        load_bundle(tmp_path / "missing.bundle", TINY)
    with pytest.raises(BundleError):
        load_bundle(tmp_path, TINY)  # a directory

    # a zip whose members are damaged or missing
    plan_pkl = zipfile.ZipFile(bundle).read("plan.pkl")
    members = {
        "no_plan": {"plan.pkl": None},
        "no_manifest": {"manifest.json": None},
        "no_image": {"dram_image.bin": None},
        "plan_garbage": {"plan.pkl": b"garbage"},
        "plan_truncated": {"plan.pkl": plan_pkl[: len(plan_pkl) // 3]},
        "plan_not_a_plan": {"plan.pkl": pickle.dumps({"config": TINY})},
        "manifest_garbage": {"manifest.json": b"{not json"},
        "manifest_binary": {"manifest.json": b"\xff\xfe\x00\xd8garbage"},
        "manifest_list": {"manifest.json": b"[1, 2]"},
    }
    for name, changes in members.items():
        path = rewrite(bundle, tmp_path / f"{name}.bundle", **changes)
        with pytest.raises(BundleError, match=str(path)):
            load_bundle(path, TINY)

    # a flipped byte inside the stored plan: the zip CRC catches it
    damaged = bytearray(data)
    at = data.index(plan_pkl[:64]) + len(plan_pkl) // 2
    damaged[at] ^= 0xFF
    path = tmp_path / "crc.bundle"
    path.write_bytes(bytes(damaged))
    with pytest.raises(BundleError, match="not a readable bundle"):
        load_bundle(path, TINY)


def test_save_refuses_an_unemitted_plan(plan: Plan, tmp_path: Path) -> None:
    from compiler.errors import CompileError

    bare = Plan(plan.config, plan.graph)
    with pytest.raises(CompileError, match="not been emitted"):
        save_bundle(bare, tmp_path / "x.bundle", "cnn")
    assert not (tmp_path / "x.bundle").exists()

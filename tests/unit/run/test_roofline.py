"""The per-layer roofline (arch/roofline.py, report.json's ``roofline``): the compute bound
checked against MACs counted from the ONNX graph's shapes, the DRAM bound against the
descriptors' lines counted one by one in plain Python, and no layer faster than its bound on
the ISA simulator."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import onnx
from onnx import helper, shape_inference

from arch import isa
from arch.config import PRESETS
from arch.listing import program_of
from arch.roofline import descriptor_lines
from compiler.compile import compile_model
from sim.app.report import write
from sim.app.session import build_report
from sim.runtime.run import run
from tests.unit.front.test_partition import _saved, conv, model_of


def depthwise(name, x, y, channels, rng, stride=1):
    node = helper.make_node(
        "Conv", [x, f"{name}.w", f"{name}.b"], [y], name=name, kernel_shape=[3, 3],
        pads=[1] * 4, strides=[stride] * 2, group=channels,
    )  # fmt: skip
    w = rng.normal(0, (2 / 9) ** 0.5, (channels, 1, 3, 3)).astype(np.float32)
    return node, {f"{name}.w": w, f"{name}.b": rng.normal(0, 0.1, channels).astype(np.float32)}


def mixed_model(seed: int = 3) -> onnx.ModelProto:
    """conv 3x3 (3 -> 8), depthwise 3x3, depthwise 3x3 stride 2, max pool, global pool, FC:
    a layer on each of the array, the window unit and the line engine."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    d1, i2 = depthwise("d1", "r", "b", 8, rng)
    d2, i3 = depthwise("d2", "b", "c", 8, rng, stride=2)
    fc_w = rng.normal(0, 0.3, (8, 5)).astype(np.float32)
    nodes = [
        c1,
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        d1,
        d2,
        helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc.w"], ["y"], name="fc"),
    ]
    return model_of(nodes, {**i1, **i2, **i3, "fc.w": fc_w}, [1, 3, 12, 12])


def onnx_macs(model: onnx.ModelProto) -> dict[str, int]:
    """MACs of each Conv and Gemm node, from the shapes onnx infers."""
    inferred = shape_inference.infer_shapes(model)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*inferred.graph.value_info, *inferred.graph.output)
    }
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    macs = {}
    for node in model.graph.node:
        if node.op_type == "Conv":
            cout, cin_per_group, kh, kw = weights[node.input[1]]
            _, _, oh, ow = shapes[node.output[0]]
            macs[node.name] = cout * cin_per_group * kh * kw * oh * ow
        elif node.op_type == "Gemm":
            k, n = weights[node.input[1]]
            macs[node.name] = k * n
    return macs


def lines_one_by_one(desc: dict, every_line: bool) -> int:
    """The lines a descriptor moves, by walking its loop nest one line at a time."""
    counts = [desc[f"loops[{lv}].count"] for lv in range(isa.DESC_LOOPS)]
    moved = 0
    for index in itertools.product(*(range(c) for c in counts)):
        y = desc["y0"] + sum(i * desc[f"loops[{lv}].ystep"] for lv, i in enumerate(index))
        x = desc["x0"] + sum(i * desc[f"loops[{lv}].xstep"] for lv, i in enumerate(index))
        inside = (not desc["height"] or 0 <= y < desc["height"]) and (
            not desc["width"] or 0 <= x < desc["width"]
        )
        moved += every_line or inside
    return moved


def dram_bytes_by_layer(exe, config) -> dict[str, dict[isa.Opcode, int]]:
    """Per layer, the bytes its LOADs read and its STOREs write."""
    line = {
        isa.Mem.ACT: config.act_line_bytes,
        isa.Mem.WGT: config.wgt_line_bytes,
        isa.Mem.PARAM: config.cols * isa.PARAM_ENTRY_BYTES,
        isa.Mem.ACC: config.out_line_bytes,
    }
    moved = {}
    for program in exe.programs:
        code = program_of(program)
        for layer in program.layers:
            total = {isa.Opcode.LOAD: 0, isa.Opcode.STORE: 0}
            for insn in code.insns[layer.insn_range[0] : layer.insn_range[1]]:
                if insn.opcode in (isa.Opcode.LOAD, isa.Opcode.STORE):
                    desc = code.descs[insn["desc"]]
                    every = insn.opcode is isa.Opcode.STORE and bool(insn["transpose"])
                    total[insn.opcode] += lines_one_by_one(desc, every) * line[desc["mem"]]
            moved[layer.name] = total
    return moved


def test_bounds_match_independent_counts(tmp_path) -> None:
    model = mixed_model()
    config = PRESETS["tiny"]
    exe = compile_model(_saved(model, tmp_path), config).executable
    x = np.random.default_rng(5).normal(0, 1, (1, 3, 12, 12)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact
    report = build_report(exe, result, {}, None, None, config)
    layers = {layer["name"]: layer for layer in report["layers"] if layer["device"] == "accel"}
    macs, moved = onnx_macs(model), dram_bytes_by_layer(exe, config)
    units = {name: layers[name]["roofline"]["unit"] for name in ("c1", "d1", "d2", "fc")}
    assert units == {"c1": "array", "d1": "window", "d2": "window", "fc": "array"}
    peak = {"array": config.rows * config.cols, "window": config.cols * 9}
    for name, count in macs.items():
        assert layers[name]["macs"] == count
        line = layers[name]["roofline"]
        assert line["compute_bound_cycles"] == math.ceil(count / peak[line["unit"]]), name
    beat = config.dram_bytes_per_cycle
    for name, layer in layers.items():
        line = layer["roofline"]
        loads, stores = moved[name][isa.Opcode.LOAD], moved[name][isa.Opcode.STORE]
        assert (line["dram_load_bytes"], line["dram_store_bytes"]) == (loads, stores), name
        # the read and the write channel run at once; a line is at least one beat
        assert line["dram_bound_cycles"] >= max(loads, stores) / beat, name
        assert line["bound_cycles"] == max(line["compute_bound_cycles"], line["dram_bound_cycles"])
        assert line["limited_by"] == (
            "compute" if line["compute_bound_cycles"] >= line["dram_bound_cycles"] else "dram"
        )
        assert line["achieved_over_bound"] == round(layer["cycles"] / line["bound_cycles"], 4)
        assert layer["cycles"] >= line["bound_cycles"], name  # a bound is never beaten
    bounds = sum(layer["roofline"]["bound_cycles"] for layer in layers.values())
    assert report["total"]["roofline_bound_cycles"] == bounds <= report["total"]["cycles"]
    # the descriptors' bytes are what the loads and stores moved: all of the run's DRAM traffic
    # but instruction and descriptor fetch and the PERF records
    reads = sum(la.dram_read_bytes for la in result.layers)
    writes = sum(la.dram_write_bytes for la in result.layers)
    assert 0 < sum(m[isa.Opcode.LOAD] for m in moved.values()) <= reads
    assert 0 < sum(m[isa.Opcode.STORE] for m in moved.values()) <= writes
    paths = write(report, tmp_path / "out")
    header = paths["csv"].read_text().splitlines()[0].split(",")
    assert {"bound_cycles", "limited_by", "achieved_over_bound"} <= set(header)
    assert json.loads(paths["json"].read_text())["layers"][0]["roofline"]["unit"] == "array"


def test_descriptor_lines_skips_padding_lines() -> None:
    """A 3-row x 4-column load of a 2 x 3 image one pixel above and left of its origin: 2 of
    the 3 rows and 3 of the 4 columns hold pixels (6 lines); a transposing store moves all 12."""
    desc = {
        "y0": -1, "x0": -1, "height": 2, "width": 3,
        **{f"loops[{lv}].{k}": 0 for lv in range(isa.DESC_LOOPS) for k in ("ystep", "xstep")},
        **{f"loops[{lv}].count": 1 for lv in range(isa.DESC_LOOPS)},
    }  # fmt: skip
    desc.update({"loops[2].count": 3, "loops[2].ystep": 1, "loops[3].count": 4})
    desc["loops[3].xstep"] = 1
    assert descriptor_lines(desc) == lines_one_by_one(desc, False) == 6
    assert descriptor_lines(desc, every_line=True) == 12


def test_roofline_by_kind_sums_cycles_and_bounds(tmp_path, capsys) -> None:
    """sim.bench.roofline_kinds on a hand-written report: per op/unit, cycles over the sum of
    the bounds; a report it cannot read is one line and exit 2."""
    from sim.bench import roofline_kinds

    def layer(op, unit, cycles, bound, limited_by="compute"):
        line = {"unit": unit, "bound_cycles": bound, "limited_by": limited_by}
        return {"name": op, "op": op, "device": "accel", "cycles": cycles, "roofline": line}

    layers = [
        layer("conv", "array", 300, 200),
        layer("conv", "window", 130, 50, "dram"),
        layer("conv", "array", 100, 100),
        {"name": "h", "op": "host", "device": "host", "cycles": 0},
    ]
    report = {"model": "m", "backend": "isa", "layers": layers,
              "total": {"cycles": 530, "utilization": 0.5}}  # fmt: skip
    assert roofline_kinds.kinds(report) == {
        "conv/array": {"layers": 2, "cycles": 400, "bound": 300, "dram": 0},
        "conv/window": {"layers": 1, "cycles": 130, "bound": 50, "dram": 1},
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert roofline_kinds.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "1 host steps" in out and "1.33" in out and "2.60" in out
    missing = tmp_path / "none.json"
    assert roofline_kinds.main([str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot read report {missing}") and "\n" not in err

"""The whole compiler in one call: a model name or ONNX file -> an executable."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

import zoo
from arch.config import AccelConfig
from arch.executable import Executable
from arch.executable.format import path_name
from arch.ops.norm import NORM_OPS
from compiler.errors import CompileError, Unplaceable
from compiler.export import assemble
from compiler.frontend import compile_placed
from compiler.ir import Graph, Node
from compiler.onnx.unbatch import model_batch, unbatch
from compiler.op_rules import KINDS
from compiler.passes import head_padding, run_back
from compiler.plan import Plan
from compiler.segments import split


@dataclass
class Compiled:
    """What :func:`compile_model` gives the user: the executable, and the fp32 ONNX model it was
    compiled from (what its accuracy is measured against)."""

    name: str
    executable: Executable
    source: onnx.ModelProto | None = field(default=None, repr=False)
    #: The model's batch: an executable runs one image, a batch of N runs it N times.
    batch: int = 1


#: Calibration inputs, or a function of the model's input shape that gives them.
Calibration = Sequence[np.ndarray] | Callable[[tuple[int, ...]], Sequence[np.ndarray]]


def input_shape(model: onnx.ModelProto | Path) -> tuple[int, ...]:
    """The static shape of the (single) graph input of ``model`` (a symbolic batch: 1)."""
    from compiler.calibrate import model_input_shape

    return model_input_shape(onnx.load(str(model)) if isinstance(model, Path) else model)


#: The largest input height/width of a zoo CNN: memory grows with its square (IMAGE_SIZE=100000
#: ran numpy out of memory in calibration instead of saying so).
MAX_IMAGE_SIZE = 1024


def resolve_model(
    model: str | Path, image_size: int | None = None, seed: int = 0
) -> tuple[str, onnx.ModelProto | Path]:
    """A zoo name (built with ``image_size`` and ``seed``) or a path to an .onnx file."""
    text = str(model)
    if text in zoo.MODELS:
        if image_size is not None and image_size > MAX_IMAGE_SIZE:
            raise CompileError(
                None,
                None,
                f"image size {image_size} of model {text!r} is too large: at most "
                f"{MAX_IMAGE_SIZE} (fp32 calibration and the DRAM image grow with its square)",
            )
        kwargs = {} if image_size is None else {"image_size": image_size}
        try:
            return text, zoo.build(text, seed=seed, **kwargs)
        except ValueError as exc:  # e.g. an image size the model cannot take
            reason = str(exc) if repr(text) in str(exc) else f"model {text!r}: {exc}"
            raise CompileError(None, None, reason) from None
    path = Path(text)
    if path.suffix == ".onnx" or path.exists():
        if not path.exists():
            raise CompileError(None, None, f"model file {path} does not exist")
        if image_size is not None:
            raise CompileError(
                None, None, "IMAGE_SIZE applies to zoo models only, not to an ONNX file"
            )
        return path_name(path.stem), path
    raise CompileError(
        None,
        None,
        f"unknown model {text!r}; use one of {', '.join(zoo.MODELS)} or a path to an .onnx file",
    )


def refuse_norm_ops(graph: Graph, config: AccelConfig) -> None:
    """A graph imported for the norm unit (``compile_front(norm_unit=True)``) compiled for a
    config without it: its layer_norm / rms_norm nodes go to the host, all at once."""
    if config.norm_unit:
        return
    norms = [n for n in graph.nodes if n.op in NORM_OPS]
    if norms:
        raise Unplaceable(
            norms[0].name,
            norms[0].op,
            f"config {config.name} has no norm unit",
            "norm_unit=true",
            indices=frozenset(graph.origins[n.name] for n in norms if n.name in graph.origins),
        )


def compile_graph(graph: Graph, config: AccelConfig) -> list[Plan | Node]:
    """Back end of a quantized graph: each device segment through the passes (partition ...
    emit) into a plan; host nodes stay as they are (:mod:`compiler.segments`). A graph of which
    nothing runs on the accelerator is refused, with the reasons. Heads that are not whole
    lines are padded first, in ``graph`` (:mod:`compiler.passes.head_padding`)."""
    refuse_norm_ops(graph, config)
    head_padding.run(graph, config.rows)
    steps = split(graph)
    for step in steps:
        if isinstance(step, Graph) and all(  # views (flatten, map/tokens, heads), concats
            n.op == "concat" or KINDS[n.op] in ("alias", "constant") for n in step.nodes
        ):
            first = step.nodes[0]  # (placement sends it to the host)
            raise Unplaceable(first.name, first.op, "would be a device program of no instruction")
    if all(isinstance(step, Node) for step in steps):
        why = "; ".join(graph.host_reasons.values()) or "no accelerator op"
        raise CompileError(None, "model", f"no node runs on the accelerator ({why})")
    return [step if isinstance(step, Node) else run_back(step, config) for step in steps]


def compile_model(
    model: str | Path,
    config: AccelConfig,
    *,
    image_size: int | None = None,
    seed: int = 0,
    calibration: Calibration | None = None,
    calib_method: str = "minmax",
) -> Compiled:
    """Compile ``model`` (a zoo name or an .onnx file) for ``config`` into an executable:
    front end (import, canonicalize, quantize), then the back end of every segment.
    ``calibration``: float inputs to calibrate on, or a function of the model's input shape
    giving them (default: a trained zoo model's training images, else seeded noise);
    ``calib_method``: minmax, percentile[:P], entropy or mse (:mod:`compiler.calib_methods`)."""
    name, proto = resolve_model(model, image_size, seed)
    try:
        loaded = onnx.load(str(proto)) if isinstance(proto, Path) else proto
        batch = model_batch(loaded)
    except Exception:  # an unreadable file: the import says what is wrong with it
        batch = 1
    if batch > 1:  # N programs of batch 1 (compiler/onnx/unbatch.py)
        proto = unbatch(loaded, batch)
    graph, steps = compile_calibrated(model, proto, config, calibration, seed, calib_method)
    return Compiled(name, assemble(name, graph, steps, config), graph.source, batch)


def compile_calibrated(
    model: object,
    proto: onnx.ModelProto | Path,
    config: AccelConfig,
    calibration: Calibration | None,
    seed: int,
    calib_method: str,
) -> tuple[Graph, list[Plan | Node]]:
    """The quantized graph of ``proto`` and its compiled steps for ``config``, calibrated on
    ``calibration`` (default: the zoo model ``model``'s own set, else seeded inputs)."""
    if calibration is None and str(model) in zoo.MODELS:
        calibration = zoo.calibration(str(model))
    if callable(calibration):
        calibration = calibration(input_shape(proto))
    graph, steps = compile_placed(
        proto,
        calibration=calibration,
        seed=seed,
        calib_method=calib_method,
        back=lambda quantized: compile_graph(quantized, config),
        norm_unit=config.norm_unit,
    )
    assert steps is not None
    return graph, steps

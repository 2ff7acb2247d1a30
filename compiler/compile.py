"""The whole compiler in one call: a model name or ONNX file -> an executable."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from arch.config import AccelConfig
from arch.executable import Executable
from compiler import zoo
from compiler.errors import CompileError
from compiler.export import to_executable
from compiler.frontend import compile_front
from compiler.passes import run_back
from compiler.plan import Plan


@dataclass
class Compiled:
    """What :func:`compile_model` gives the user: the executable, and the fp32 ONNX model it was
    compiled from (what its accuracy is measured against)."""

    name: str
    executable: Executable
    source: onnx.ModelProto | None = field(default=None, repr=False)


def resolve_model(
    model: str | Path, image_size: int | None = None, seed: int = 0
) -> tuple[str, onnx.ModelProto | Path]:
    """A zoo name (built with ``image_size`` and ``seed``) or a path to an .onnx file."""
    text = str(model)
    if text in zoo.MODELS:
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
        return path.stem, path
    raise CompileError(
        None,
        None,
        f"unknown model {text!r}; use one of {', '.join(zoo.MODELS)} or a path to an .onnx file",
    )


def compile_plan(
    model: str | Path, config: AccelConfig, *, image_size: int | None = None, seed: int = 0
) -> tuple[str, Plan]:
    """Front end (import, canonicalize, quantize) then back end (partition ... emit): the
    compiler's working plan, for its own tests and tools."""
    name, proto = resolve_model(model, image_size, seed)
    graph = compile_front(proto, seed=seed)
    return name, run_back(graph, config)


def compile_model(
    model: str | Path, config: AccelConfig, *, image_size: int | None = None, seed: int = 0
) -> Compiled:
    """Compile ``model`` (a zoo name or an .onnx file) for ``config`` into an executable."""
    name, plan = compile_plan(model, config, image_size=image_size, seed=seed)
    return Compiled(name, to_executable(plan, name), plan.graph.source)

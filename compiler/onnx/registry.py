"""The op handlers, registered per ONNX op type.

A handler is a function ``(state, node, name)``: it imports the ONNX ``node`` (named ``name``
in the IR) into ``state`` (:class:`compiler.onnx.state.ImportState`) or raises
:class:`compiler.errors.CompileError` to refuse it (the node then goes to the host, and the
state is rolled back). The ops the front end supports are the registry's keys.

Adding an op: write its handler in the module of its family (a new family module goes in the
import line of ``compiler/onnx/__init__.py``) and decorate it with ``@handles("OpType")``;
nothing else lists it.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from .state import ImportState

__all__ = ["HANDLERS", "Handler", "handles"]

Handler = Callable[[ImportState, onnx.NodeProto, str], None]

#: ONNX op type -> its handler (default domain, and the com.microsoft ops of ``FUSED_OPS``)
HANDLERS: dict[str, Handler] = {}


def handles(*ops: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``ops``."""

    def register(handler: Handler) -> Handler:
        for op in ops:
            if op in HANDLERS:
                raise ValueError(f"ONNX op {op} has two handlers")
            HANDLERS[op] = handler
        return handler

    return register

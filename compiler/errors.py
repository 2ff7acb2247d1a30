"""The compiler's one user-facing error: what went wrong, where, and what is supported."""

from __future__ import annotations

__all__ = ["CompileError", "Unplaceable", "VerifyError"]


class CompileError(Exception):
    """An unsupported or malformed model, reported in one line.

    ``str()`` reads ``node 'layer1.0.conv1' (Conv): dilation 2 is not supported; supported: 1``.

    Parameters
    ----------
    node
        Name of the offending node (or graph input, or file); None when the whole model is at fault.
    op
        Its op type (an ONNX op such as ``"Conv"``, an IR op such as ``"conv"``, or a kind such
        as ``"graph input"``); None when there is none.
    reason
        What is wrong, as a sentence fragment without a final period.
    supported
        What would have been accepted, appended as ``; supported: ...``.
    """

    def __init__(
        self, node: str | None, op: str | None, reason: str, supported: str | None = None
    ) -> None:
        self.node = node
        self.op = op
        self.reason = reason
        self.supported = supported
        super().__init__(self._message())

    def _message(self) -> str:
        if self.node is not None:
            where = f"node '{self.node}'" + (f" ({self.op})" if self.op else "")
        else:
            where = self.op or ""
        text = f"{where}: {self.reason}" if where else self.reason
        if self.supported:
            text += f"; supported: {self.supported}"
        return text

    def __str__(self) -> str:
        return self._message()


class VerifyError(CompileError):
    """An IR invariant does not hold (:meth:`compiler.ir.Graph.verify`): a compiler bug or a
    hand-built graph that breaks the contract, rather than an unsupported model."""


class Unplaceable(CompileError):
    """The accelerator cannot run this node, though the host can (a shape, a quantization or a
    memory budget it lacks): :func:`compiler.placement.place` sends the ONNX node(s) it came
    from to the host and compiles again. Raised only with that meaning; every other error
    reaches the user.

    ``indices``: those ONNX node indices, when the raiser knows them (the importer); else the
    refused IR node's origin in the graph is used.
    """

    def __init__(
        self,
        node: str | None,
        op: str | None,
        reason: str,
        supported: str | None = None,
        *,
        indices: frozenset[int] | None = None,
    ) -> None:
        super().__init__(node, op, reason, supported)
        self.indices = indices

    @property
    def why(self) -> str:
        """The reason, as the host placement records it."""
        return self.reason + (f" (supported: {self.supported})" if self.supported else "")

"""Host placement: one loop that owns the set of ONNX nodes forced to the host.

A node the accelerator cannot run is refused where that is found - by its import handler
(it goes to the host at once, :mod:`compiler.onnx`), or later, by a pass that cannot fold,
quantize, lay out or tile it, which raises :class:`~compiler.errors.Unplaceable`. :func:`place`
then adds the ONNX node(s) it came from to the forced set and runs the attempt again (the
compiler's attempt, :func:`compiler.frontend.compile_placed`, imports the prepared model again
and calibrates only tensors it has not measured before). Every other error - a malformed model, a
verifier's :class:`~compiler.errors.VerifyError` (a compiler bug) - reaches the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .errors import Unplaceable
from .ir import Graph

__all__ = ["Placement", "place"]

T = TypeVar("T")


@dataclass
class Placement:
    """The ONNX nodes forced to the host (index -> why), and the graph of the attempt under
    way, whose ``origins`` name the ONNX node of a refused IR node."""

    forced: dict[int, str]
    graph: Graph | None = None

    def add(self, refusal: Unplaceable) -> bool:
        """Force the ONNX nodes of ``refusal`` to the host; False if it names none that is
        not forced already (the refusal is then final)."""
        if refusal.indices is not None:
            indices = set(refusal.indices)
        elif self.graph is not None and refusal.node in self.graph.origins:
            indices = {self.graph.origins[refusal.node]}
        else:
            indices = set()
        new = sorted(indices - self.forced.keys())
        for index in new:
            self.forced[index] = refusal.why
        return bool(new)


def place(attempt: Callable[[Placement], T], host: Mapping[int, str] | None = None) -> T:
    """``attempt``'s result, run with the ONNX nodes ``host`` forced to the host and again with
    each node it refuses (:class:`Unplaceable`) forced there too."""
    placement = Placement(dict(host or {}))
    while True:
        placement.graph = None
        try:
            return attempt(placement)
        except Unplaceable as refusal:
            if not placement.add(refusal):
                raise

"""The integer reference of one input, computed once in a background thread and shared.

A run needs the reference's tensors in several places: the shards start from the tensors at
their first layer, every layer's output is checked against it, and the fp32 and SQNR
comparisons need all of it. :class:`ReferenceStream` evaluates the graph node by node in a
daemon thread; :meth:`~ReferenceStream.wait` returns as soon as the named tensors exist, and
:meth:`~ReferenceStream.result` when all do (every consumer used to evaluate it again: a
ResNet-50 reference was 3.4 s of one core each time, ~0.6 s since its GEMMs use float64 BLAS).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future

import numpy as np

from arch.executable import Executable
from arch.reference import checked_input, evaluate_node, quantize_input


class ReferenceStream:
    """Every tensor of ``exe``'s reference graph for fp32 input ``x``, computed in order."""

    def __init__(self, exe: Executable, x: np.ndarray) -> None:
        #: The tensors computed so far (complete once :attr:`future` is done).
        self.values: dict[str, np.ndarray] = {}
        #: Done with :attr:`values` when every node is computed, or with the error that stopped it.
        self.future: Future[dict[str, np.ndarray]] = Future()
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._evaluate, args=(exe, x), name="reference", daemon=True
        )
        self._thread.start()

    def _evaluate(self, exe: Executable, x: np.ndarray) -> None:
        graph = exe.reference
        try:
            quantized = quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)
            with self._changed:
                self.values[graph.inputs[0]] = checked_input(graph, quantized)
            for node in graph.nodes:
                if self._stopping.is_set():
                    raise StoppedError("the reference was stopped")
                value = evaluate_node(graph, node, [self.values[i] for i in node.inputs])
                with self._changed:
                    self.values[node.output] = value
                    self._changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - raised to whoever waits
            self.future.set_exception(exc)
        else:
            self.future.set_result(self.values)
        with self._changed:
            self._changed.notify_all()

    def wait(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """The values once ``names`` are all computed (raises the evaluation's error)."""
        wanted = list(names)
        with self._changed:
            while not all(name in self.values for name in wanted):
                if self.future.done():
                    self.future.result()  # the error that stopped the evaluation
                    missing = [name for name in wanted if name not in self.values]
                    raise KeyError(f"the reference graph has no tensor {missing[0]!r}")
                self._changed.wait()
        return self.values

    def result(self) -> dict[str, np.ndarray]:
        """Every tensor (waits for the last node)."""
        return self.future.result()

    def stop(self) -> None:
        """Stop after the node being computed and wait for it: a run that fails ends without
        a thread left inside a library's native code (onnxruntime host ops) at exit."""
        self._stopping.set()
        self._thread.join()


class StoppedError(RuntimeError):
    """The stream was stopped before its last node."""

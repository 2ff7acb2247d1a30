"""The IR's ops, one :class:`~arch.ops.spec.OpSpec` each, beside its evaluator, by family.

:data:`OP_SPECS` is the registry, in the families' order; :mod:`arch.reference` and the
compiler (:mod:`compiler.op_rules`) derive their tables from it.

Adding an op: write its evaluator, its output-shape rule (attrs and shapes only: the compiler
checks fp32 graphs with it too) and its ``check_quantized`` (its int8 params' shapes and ranges)
in its family's module (or a new family module, listed below) and add its
:class:`~arch.ops.spec.OpSpec` to that module's ``SPECS``; then give it one entry in
``compiler/op_rules.py``: its fp32 param check (``compiler/ir_checks.py``), its quantizer
(``compiler/quantizers.py``) and the layer kind the accelerator runs it as (a new kind also needs
``LAYER_KINDS`` in ``arch/executable/format.py`` and an entry in ``schedule.BUILDERS``,
``tile.TILERS`` and ``constants.PARAM_SETS``). Importing fails naming the op while its compiler
rule is missing; ``tests/unit/arch/test_op_specs.py`` fails while a kind table misses a kind.
"""

from __future__ import annotations

from arch.ops import attention, constant, conv, elementwise, host, norm, pool, views
from arch.ops.spec import OpSpec, registry

__all__ = ["OP_SPECS", "OpSpec"]

#: Every op of a quantized graph, by name.
OP_SPECS: dict[str, OpSpec] = registry(
    conv.SPECS,  # conv, gemm
    pool.SPECS,  # maxpool, avgpool, global_avgpool
    elementwise.SPECS,  # add, scale
    views.SPECS,  # flatten, concat, channel_slice, upsample, depth_to_space, head views
    attention.SPECS,  # batch_matmul, softmax
    norm.SPECS,  # layer_norm, rms_norm, row_softmax (the norm unit)
    constant.SPECS,  # constant (codes in the DRAM image)
    host.SPECS,  # host
)

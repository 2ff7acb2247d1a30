"""Max pools on the window unit: a max pool of at most 3x3 taps with equal strides runs as
DWCONVs in max mode (the depthwise walk of :mod:`compiler.passes.schedule`), reading each input
row of a tile once through the three ACT read ports, instead of POOLs over windows the DMA
gathered tap by tap (9 ACT lines per output of a 3x3 pool)."""

from __future__ import annotations

from arch import isa
from compiler.plan import GemmShape, Layer, Plan

MAX_STRIDE = isa.DWCONV.leaf_by_path["stride"].hi
MAX_OUT = isa.DWCONV.leaf_by_path["out_w"].hi


def window_pool_shape(plan: Plan, layer: Layer) -> GemmShape | None:
    """The depthwise shape a max pool ``layer`` runs as on the window unit, or None when it
    needs POOL (a global pool, a kernel over 3x3, unequal strides, rows over ``out_w``)."""
    node = layer.node
    if node.op != "maxpool" or "kernel" not in node.attrs:
        return None
    src, out = plan.tensor(layer.inputs[0]), plan.tensors[layer.output]
    (kh, kw), (sh, sw) = node.attrs["kernel"], node.attrs.get("stride", (1, 1))
    if max(kh, kw) > isa.DW_KERNEL_MAX or sh != sw or sh > MAX_STRIDE or out.w > MAX_OUT:
        return None
    pads = tuple(node.attrs.get("pads", (0, 0, 0, 0)))
    c = out.channels
    return GemmShape(src.h, src.w, c, (kh, kw), (sh, sw), pads, out.h, out.w, c, depthwise=True)

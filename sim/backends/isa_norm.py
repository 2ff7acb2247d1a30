"""NORM on the ISA simulator: the norm unit's row ops, bit-exact with :mod:`arch.norm_ops`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from arch import isa, norm_ops
from arch.isa import ErrorCode, NormMode
from sim.backends.isa_results import IsaSimError

if TYPE_CHECKING:
    from sim.backends.isa_machine import Machine

__all__ = ["exec_norm"]

MASKED_CODE = -128  # a mask line's code that masks its position


def _bad(index: int, message: str) -> IsaSimError:
    return IsaSimError(ErrorCode.BAD_FIELD, f"norm.{message}", index)


def _lines(machine: Machine, index: int, what: str, first: int, count: int) -> None:
    machine._check_lines(index, what, first, count, machine.config.act_lines)


def _row_block(machine: Machine, first: int, m: int, k_iter: int) -> np.ndarray:
    """ACT lines ``first + k*m + i`` as (m, k_iter*rows): row i's channel blocks side by side."""
    lines = first + np.add.outer(np.arange(k_iter) * m, np.arange(m))
    return machine.act[lines].transpose(1, 0, 2).reshape(m, -1)


def _masks(
    machine: Machine, index: int, insn: isa.Instruction, channels: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The additive mask codes and the masked positions of the m rows, from the mask fields."""
    m, k_iter = insn["m"], insn["k_iter"]
    mask, masked = None, np.zeros((m, channels), dtype=bool)
    if insn["mask_lines"]:
        per_row = insn["mask_per_row"]
        count = k_iter * m if per_row else k_iter
        _lines(machine, index, "mask ACT", insn["mask_addr"], count)
        if per_row:
            codes = _row_block(machine, insn["mask_addr"], m, k_iter)[:, :channels]
        else:
            first = insn["mask_addr"]
            row = machine.act[first : first + k_iter].reshape(-1)[:channels]
            codes = np.broadcast_to(row, (m, channels))
        masked = codes == MASKED_CODE
        mask = np.where(masked, 0, codes).astype(np.int64)
    if insn["causal"]:
        position = np.arange(channels)
        masked = masked | (position[None, :] > insn["row0"] + np.arange(m)[:, None])
    return mask, masked


def exec_norm(machine: Machine, index: int, insn: isa.Instruction) -> int:
    """Execute NORM (see :data:`arch.isa.NORM`); return its cycles on the norm unit."""
    c = machine.config  # decode refused NORM without the unit (ILLEGAL_OPCODE)
    machine._require_positive(index, insn, "m", "k_iter")
    m, k_iter, mode = insn["m"], insn["k_iter"], insn["mode"]
    lanes = insn["last_lanes"] or c.rows
    if lanes > c.rows:
        raise _bad(index, f"last_lanes {lanes} exceeds the line's {c.rows} lanes")
    if mode not in (NormMode.LAYERNORM, NormMode.RMSNORM, NormMode.SOFTMAX):
        raise _bad(index, f"mode {mode} is not LAYERNORM, RMSNORM or SOFTMAX")
    softmax = mode is NormMode.SOFTMAX
    if not softmax and (insn["mask_lines"] or insn["causal"]):
        raise _bad(index, "mask_lines and causal are for SOFTMAX only")
    channels = (k_iter - 1) * c.rows + lanes
    _lines(machine, index, "ACT", insn["act_addr"], k_iter * m)
    machine._check_lines(index, "ACC", insn["acc_addr"], k_iter * m, c.acc_lines)
    x = _row_block(machine, insn["act_addr"], m, k_iter)[:, :channels]
    first = np.array([insn["param_addr"]])
    scalar = int(machine._param(index, "res_mult", first)[0, 0])
    if softmax:
        if not 1 <= scalar < 2**24:
            raise _bad(index, f"softmax K (PARAM res_mult) {scalar} is outside 1..2**24-1")
        mask, masked = _masks(machine, index, insn, channels)
        out = norm_ops.softmax_rows_q8(x, scalar, mask, masked)
    else:
        if scalar < 1:
            raise _bad(index, f"eps_codes (PARAM res_mult) {scalar} is below 1")
        lines = insn["param_addr"] + np.arange(k_iter)
        mult, shift, bias = (
            machine._param(index, name, lines).reshape(-1)[:channels]
            for name in ("mult", "shift", "bias")
        )
        if (shift < 8).any():
            raise _bad(index, f"PARAM shift {int(shift.min())} is below 8 (the Q8 output)")
        params = norm_ops.NormParams(
            mode is NormMode.RMSNORM, scalar, mult, shift, bias, insn["zp_in"]
        )
        out = norm_ops.norm_rows_q8(x, params)
    full = np.zeros((m, k_iter * c.cols), dtype=np.int64)
    full[:, :channels] = np.clip(out, isa.INT32_MIN, isa.INT32_MAX)
    lines = insn["acc_addr"] + np.add.outer(np.arange(k_iter) * m, np.arange(m))
    machine.acc[lines] = full.reshape(m, k_iter, c.cols).transpose(1, 0, 2).astype(np.int32)
    machine.stats.alu_ops += m * channels
    return isa.norm_cycles(mode, m, k_iter)

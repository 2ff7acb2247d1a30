"""Fuzz: non-finite and extreme numbers (NaN, +-inf, denormals, values near float32's largest)
planted at random in small generated ONNX models - in a weight, in the run's input, in a
quantization scale - and host ops (Log, Sqrt, Reciprocal) fed values outside their domain.

Contract, through the command line in process: a NaN or an infinity anywhere is refused (exit 2
or 3, one line naming the node, the tensor or the file), never run to exit 0; a host step whose
output numpy computes as non-finite is never exit 0; what is finite (denormals, huge values) may
run, and then checks bit-exact (exit 0) - never exit 4, never a traceback. ``make test`` runs
:data:`SAMPLE` cases; ``make fuzz`` 10% of FUZZ_CASES."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from tests.fuzz.contract import assert_refused, campaign_size, rng_for, time_bound
from tests.unit.front.test_hostile_models import WEIGHT_LIMIT, model, qdq_model
from tests.unit.run.test_cli_errors import in_process

SAMPLE = 2
CASES = campaign_size(SAMPLE, 100)
WHERE = ("weight", "input", "scale", "host")
VALUES = {
    "nan": np.nan,
    "inf": np.inf,
    "-inf": -np.inf,
    "denormal": 1e-41,
    "huge": 3e38,
    "-huge": -3e38,
}
HOST_OPS = ("Log", "Sqrt", "Reciprocal")
CASE_SECONDS = 300


def plant(rng: np.random.Generator, array: np.ndarray, value: float) -> np.ndarray:
    """``array`` with ``value`` at 1-3 random places."""
    out = array.copy()
    flat = out.reshape(-1)
    flat[rng.integers(0, flat.size, int(rng.integers(1, 4)))] = value
    return out


def planted_non_finite(value: float) -> bool:
    return not np.isfinite(np.float32(value))


def matmul_model(path: Path, w: np.ndarray, op: str | None = None) -> Path:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h" if op else "y"], name="fc")]
    if op:
        nodes.append(helper.make_node(op, ["h"], ["y"], name=f"the_{op.lower()}"))
    return model(nodes, {"w": w}, path)


@pytest.mark.parametrize("case", range(CASES))
def test_non_finite_numbers_are_refused_or_run_exactly(case, tmp_path, capsys) -> None:
    rng = rng_for("non_finite", case)
    where = WHERE[case % len(WHERE)]
    label = list(VALUES)[int(rng.integers(len(VALUES)))]
    value = VALUES[label]
    w = rng.normal(0, 0.3, (16, 16)).astype(np.float32)
    x = rng.normal(0, 1, (1, 16)).astype(np.float32)
    names: tuple[str, ...] = ()
    op = None
    if where == "weight":
        w = plant(rng, w, value)
        # (a weight beyond the int8 scale's bound, 3e38 here: refused naming that initializer)
        names = ("w",) if planted_non_finite(value) or abs(value) > WEIGHT_LIMIT else ()
    elif where == "input":
        x = plant(rng, x, value)
    elif where == "host":
        op = HOST_OPS[int(rng.integers(len(HOST_OPS)))]
        x = np.zeros_like(x) if op == "Reciprocal" and rng.random() < 0.5 else x
    path = tmp_path / "m.onnx"
    if where == "scale":
        scales = [0.05, 0.01, 0.05]
        slot = int(rng.integers(3))
        scales[slot] = float(np.float32(value))
        scales[2] = scales[0] if slot == 0 else scales[2]  # a Q/DQ pair keeps one scale
        qdq_model(path, *scales)
    else:
        matmul_model(path, w, op)
    image = tmp_path / "x.npy"
    np.save(image, x)
    planted = where != "host" and planted_non_finite(value)
    what = f"case {case}: {label} in the {where}" + (f" ({op})" if op else "")
    with time_bound(CASE_SECONDS, what):
        result = in_process(capsys, "--model", str(path), "--config", "tiny",
                            "--image", str(image), "--out", str(tmp_path / "o"))  # fmt: skip
    if result.returncode == 0:
        assert not planted, f"{what}: exit 0\n{result.stdout[-2000:]}"
        if op is not None:  # numpy: the host op's input, with a margin for its int8 codes
            h = x.astype(np.float64) @ w.astype(np.float64)
            outside = (h < -0.25).any() if op != "Reciprocal" else not x.any()
            assert not outside, f"{what}: exit 0 for a host op outside its domain"
        return
    line = assert_refused(result, what, *names, codes=(2, 3))
    if planted and where == "input":
        assert str(image) in line or "input" in line, f"{what}: {line}"

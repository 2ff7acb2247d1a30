"""A sweep cell whose model does not compile comes back as a refusal naming the model, the
config and the node (sim/scaleout/sweep.py), not as an exception Dask reports with a traceback;
``tests/network/test_scaleout_errors.py`` runs the whole ``make sweep`` (``make test-long``)."""

from __future__ import annotations

from arch.config import PRESETS
from sim.scaleout import sweep
from tests.unit.run.test_cli_errors import one_op_model


def test_a_cell_whose_model_does_not_compile_is_refused(tmp_path):
    model = one_op_model("LSTM", "encoder_lstm", tmp_path / "lstm.onnx")
    row = sweep.run_cell(str(model), PRESETS["tiny"].to_json(), "tiny", "isa", 0)
    assert list(row) == ["refused"], row
    assert f"model {str(model)!r}" in row["refused"]
    assert "config 'tiny'" in row["refused"]
    assert "'encoder_lstm' (LSTM)" in row["refused"]

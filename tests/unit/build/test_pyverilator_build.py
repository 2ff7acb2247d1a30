"""The pyverilator build without running Verilator: how it differs from the cocotb build of the
same design, and the wrapper sim/verilate/pyverilator_compat.py makes from pyverilator-mm's
template."""

import dataclasses

import pytest

from arch.config import PRESETS
from sim.backends.accelerator import accelerator_spec
from sim.bench.speed import raw_spec
from sim.verilate import build as vb
from sim.verilate import pyverilator_compat
from sim.verilate.pyverilator_build import PYVERILATOR_MAIN, pyverilator_spec
from sim.verilate.toolchain import find_toolchain


def test_pyverilator_build_is_the_same_model_as_a_shared_object():
    spec = accelerator_spec(PRESETS["tiny"])
    pyv = pyverilator_spec(spec)
    assert pyv.main == PYVERILATOR_MAIN and not vb.uses_cocotb(pyv) and pyv.public == ()
    for name in ("sources", "cpp_sources", "toplevel", "waves", "clock"):
        assert getattr(pyv, name) == getattr(spec, name), name
    extra = pyv.extra_args[len(spec.extra_args) :]
    assert pyv.extra_args[: len(spec.extra_args)] == spec.extra_args
    assert "-fPIC" in " ".join(extra) and "-shared" in extra
    assert f"+define+COSIM_PYVERILATOR_WRAPPER={pyverilator_compat.fingerprint()}" in extra
    keys = {vb.cache_key(s) for s in (spec, pyv, pyverilator_spec(spec, clock="rst"))}
    assert len(keys) == 3
    with pytest.raises(ValueError, match="has its own C\\+\\+ main"):
        pyverilator_spec(raw_spec(spec))
    assert pyverilator_spec(dataclasses.replace(spec, waves="vcd")).waves == "vcd"


HEADER = """\
class alignas(VL_CACHE_LINE_BYTES) Vtop VL_NOT_FINAL : public VerilatedModel {
  public:
    VL_IN8(&clk,0,0);
    VL_IN8(&a___05Fb,7,0);
    VL_OUT(&q,31,0);
    VL_OUTW(&wide,99,0,4);
};
"""


def test_wrapper_from_pyverilator_template_with_the_compat_fixes(tmp_path):
    find_toolchain().apply_to_environ()  # pyverilator looks for `verilator` on PATH
    (tmp_path / "Vtop.h").write_text(HEADER)
    text = pyverilator_compat.write_wrapper(tmp_path).read_text()
    for accessor in ("set_clk", "set_a___05Fb", "get_q", "get_wide(Vtop* top, int word)"):
        assert accessor in text, accessor
    assert "set_q" not in text  # outputs are read-only
    assert "Verilated::runFlushCallbacks();" in text and "flushCall" not in text  # (2)
    assert "COSIM_TRACE_MODEL(top, tfp);" in text and "struct CosimNoTrace" in text  # (3)
    assert "new Vtop(context" in text and "delete context;" in text  # (5)
    assert "main_time = 0;" in text and "Verilated::traceEverOn(true);" not in text

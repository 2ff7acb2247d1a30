"""The committed RTL in rtl/ is what `make rtl` generates from the current sources."""

import pytest

from arch.config import PRESETS
from hdl_gen.generate import render, rtl_dir


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_committed_rtl_is_current(name):
    for filename, text in render(PRESETS[name]).items():
        path = rtl_dir(name) / filename
        assert path.exists(), f"{path} missing: run `make rtl`"
        assert path.read_text() == text, f"{path} is stale: run `make rtl`"

"""RTL of a config that is not a preset is generated once per config and generator."""

import dataclasses

import pytest

from arch.config import PRESETS
from hdl_gen import generate
from sim.backends import accelerator


@pytest.fixture
def gen_root(tmp_path, monkeypatch):
    monkeypatch.setattr(accelerator, "BUILD_ROOT", tmp_path)
    return tmp_path / "gen"


def test_a_non_preset_config_is_generated_once_and_read_back(gen_root, monkeypatch):
    config = dataclasses.replace(PRESETS["tiny"], dram_latency=7)
    renders = []
    real_render = generate.render

    def counting_render(*args, **kwargs):
        renders.append(real_render(*args, **kwargs))
        return renders[-1]

    monkeypatch.setattr(generate, "render", counting_render)
    first = accelerator.rtl_source(config)
    again = accelerator.rtl_source(config)
    assert first == again and len(renders) == 1
    assert first.is_relative_to(gen_root)
    # every file the generator wrote, byte for byte (test_rtl_current checks the generator)
    assert {path.name: path.read_text() for path in first.parent.iterdir()} == renders[0]
    assert (first.parent / "config.json").read_text().strip() == config.to_json()


def test_a_generator_change_or_the_checks_variant_is_another_folder(gen_root, monkeypatch):
    config = dataclasses.replace(PRESETS["tiny"], dram_latency=7)
    plain = accelerator.generator_digest(config, checks=False)
    assert accelerator.generator_digest(config, checks=True) != plain
    other = dataclasses.replace(config, dram_latency=8)
    assert accelerator.generator_digest(other, checks=False) != plain
    # a change in a nested arch module (the ISA's fields) changes the digest too
    formats = accelerator.REPO_ROOT / "arch" / "isa" / "formats.py"
    real_read_bytes = type(formats).read_bytes

    def edited(path):
        data = real_read_bytes(path)
        return data + b"\n# edited\n" if path == formats else data

    monkeypatch.setattr(type(formats), "read_bytes", edited)
    assert accelerator.generator_digest(config, checks=False) != plain


def test_a_preset_uses_its_committed_rtl(gen_root):
    path = accelerator.rtl_source(PRESETS["tiny"])
    assert path == accelerator.RTL_ROOT / "tiny" / path.name
    assert not gen_root.exists()

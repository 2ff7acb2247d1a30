"""Example user hooks for RTL runs (sim/hooks.py): ``HOOKS=sim.hook_examples.dram_bursts``."""

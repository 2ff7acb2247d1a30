"""Example user hooks for RTL runs (sim/backends/hooks.py):
``HOOKS=sim.hook_examples.dram_bursts``."""

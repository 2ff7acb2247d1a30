"""Waveforms of accelerator runs: windowed FST/VCD dumps under ``waves/``, GTKWave save files
with signals grouped by unit and ISA names, and reading dumps back for checks.

- :mod:`sim.waves.window`: what to trace (a layer, an instruction range or a cycle range).
- :mod:`sim.waves.signals`: the signals shown, grouped by unit (one table).
- :mod:`sim.waves.savefile`: the ``.gtkw`` save file and translate-filter files.
- :mod:`sim.waves.dump`: reading a dump back (pywellen).
"""

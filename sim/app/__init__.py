"""The application around a run: ``make sim``'s command line (``cli``, installed as ``cosim`` by
``console``) and the Python API (``api``) over one session (``session``: a request in, an
outcome out), the inputs users bring (``run_inputs``, ``images``, ``calib_data``), the run
directory and its report (``rundir``, ``prune``, ``report``, ``provenance``, ``sqnr_plot``),
the measurements beside the simulation (``side_work``), held-out evaluation (``evaluate``) and
failure waveforms (``retrace``)."""

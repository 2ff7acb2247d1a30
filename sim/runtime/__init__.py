"""Running an executable: the step loop (``execute``) that runs each device program on a backend
and each host step on onnxruntime, checking every layer against the integer reference
(``reference_stream``), for one input (``run``), many (``batch``) or a layer range from its
checkpoint (``checkpoint``); the host side (``host``), input checks (``inputs``), DRAM guard
bands (``guard``) and what a run returns (``results``)."""

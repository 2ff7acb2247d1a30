"""``python -m sim.bench``: see :mod:`sim.bench.speed`."""

import sys

from sim.bench.speed import main

sys.exit(main())

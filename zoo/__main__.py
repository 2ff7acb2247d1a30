"""``python -m zoo``: see :mod:`zoo.cli`."""

from .cli import main

raise SystemExit(main())

"""``python -m compiler.zoo``: see :mod:`compiler.zoo.cli`."""

from .cli import main

raise SystemExit(main())

"""``make timeline``: print where the newest run's ``timeline.json`` is and how to open it.

``python -m sim.app.open_timeline [run-directory-or-timeline.json]``. Perfetto UI runs in the
browser and reads local files only when the user picks them, so this names the file and the
steps; exits 2 with one line when there is no timeline.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sim.app.session import RUNS_ROOT

NAME = "timeline.json"


def newest_timeline(root: Path) -> Path | None:
    """The most recently written timeline of the run directories under ``root``."""
    found = [p for p in root.glob(f"*/{NAME}") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime).resolve() if found else None


def main(argv: list[str], root: Path = RUNS_ROOT) -> int:
    path = Path(argv[0]) if argv else newest_timeline(root)
    if path is not None and path.is_dir():
        path = path / NAME
    if path is None or not path.is_file():
        where = f"at {path}" if path is not None else f"in the runs under {root}"
        print(
            f"error: no {NAME} {where}; every `make sim` writes one "
            "(e.g. `make sim MODEL=cnn CONFIG=tiny`)",
            file=sys.stderr,
        )
        return 2
    print(path)
    print(
        "open it in Perfetto UI: https://ui.perfetto.dev -> 'Open trace file' (or drop the file "
        "on the page); or in Chrome: chrome://tracing -> Load. 1 us on the ruler = 1 cycle."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

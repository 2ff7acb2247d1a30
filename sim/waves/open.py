"""``make waves``: open the newest dump in ``waves/`` in GTKWave with its save file.

``python -m sim.waves.open [dump-or-savefile]``; exits 2 with a message when there is no dump
or GTKWave is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from sim.waves.window import FORMATS, WAVES_DIR


def newest_dump(directory: Path) -> Path | None:
    dumps = [p for fmt in FORMATS for p in directory.glob(f"*.{fmt}")]
    return max(dumps, key=lambda p: p.stat().st_mtime) if dumps else None


def main(argv: list[str]) -> int:
    dump = Path(argv[0]) if argv else newest_dump(WAVES_DIR)
    if dump is not None and dump.suffix == ".gtkw":
        found = [dump.with_suffix(f".{fmt}") for fmt in FORMATS]
        dump = next((p for p in found if p.exists()), dump.with_suffix(".fst"))
    if dump is None or not dump.exists():
        print(
            f"error: no waveform dump {f'at {dump}' if dump else f'in {WAVES_DIR}'}; "
            "make one with e.g. `make sim MODEL=resnet WAVE_LAYER=layer3.0.conv1`",
            file=sys.stderr,
        )
        return 2
    gtkwave = shutil.which("gtkwave")
    if gtkwave is None:
        print(
            "error: GTKWave is not installed (sudo apt-get install -y gtkwave); "
            f"the dump is {dump}, its save file {dump.with_suffix('.gtkw')}",
            file=sys.stderr,
        )
        return 2
    savefile = dump.with_suffix(".gtkw")
    command = [gtkwave, str(dump), *([str(savefile)] if savefile.exists() else [])]
    print(" ".join(command))
    return subprocess.call(command)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

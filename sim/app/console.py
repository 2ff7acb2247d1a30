"""``cosim``: the installed command-line tool.

``cosim sim ...`` compiles and runs a model, or runs a saved executable (what ``make sim`` runs:
:mod:`sim.app.cli`); ``cosim toolchain`` checks g++/make/perl and Verilator. Exit codes are the
commands' own (``cosim sim``: 0 bit-exact, 1 mismatch, 2 bad input, 3 simulator/accelerator
error, 4 internal error).
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def _sim(argv: list[str]) -> int:
    from sim.app import cli

    return cli.main(argv, prog="cosim sim")


def _toolchain(argv: list[str]) -> int:
    from sim.verilate import toolchain

    return toolchain.main(argv)


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "sim": (_sim, "compile a model (or load an executable), run it, check it bit for bit"),
    "toolchain": (_toolchain, "check g++/make/perl and Verilator; print what will be used"),
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in COMMANDS:
        usage = (
            "usage: cosim {"
            + ",".join(COMMANDS)
            + "} ...\n"
            + "".join(f"  {name:<10} {doc}\n" for name, (_run, doc) in COMMANDS.items())
        )
        if args and args[0] in ("-h", "--help"):
            print(usage, end="")
            return 0
        where = f"unknown command {args[0]!r}; " if args else ""
        print(f"error: {where}{usage}", end="", file=sys.stderr)
        return 2
    run, _doc = COMMANDS[args[0]]
    return run(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())

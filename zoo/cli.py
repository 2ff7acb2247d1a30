"""Command line of the model zoo: ``python -m zoo NAME -o model.onnx``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import onnx

from . import MODELS, build

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m zoo",
        description="Write a zoo model (random seeded weights, built by code) as an ONNX file.",
        epilog="Unknown model names and bad sizes are reported in one line, exit status 2.",
    )
    parser.add_argument(
        "name",
        metavar="NAME",
        help=f"model, one of: {', '.join(MODELS)} (resnet is resnet18; cnn is a small residual "
        "CNN; mlp a 3-layer perceptron)",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        metavar="N",
        help="input height and width (default: 224, 32 for cnn; mlp takes none)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="S", help="weight seed (default: %(default)s)"
    )
    parser.add_argument(
        "-o", "--output", type=Path, required=True, metavar="PATH", help="ONNX file to write"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        model = build(args.name, image_size=args.image_size, seed=args.seed)
    except ValueError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        onnx.save(model, args.output)
    except OSError as exc:
        print(f"{parser.prog}: error: cannot write {args.output}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}: {model.graph.name}, {len(model.graph.node)} nodes")
    return 0

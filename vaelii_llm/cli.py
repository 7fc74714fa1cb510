"""The ``vaelii-llm`` command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from vaelii_llm import __version__

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaelii-llm",
        description="Talk to a model, let it read a knowledge base, or take a yes/no vote.",
    )
    parser.add_argument("--version", action="version", version=f"vaelii-llm {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the return value is the exit status."""
    build_parser().parse_args(argv)
    return 0

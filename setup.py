"""Refuses an old Python in words before pip resolves a dependency that has no
release for it (``pyproject.toml`` holds everything else)."""

import sys

if sys.version_info < (3, 11):  # noqa: UP036 - this file runs on the Python pip runs on
    sys.exit(
        "vaelii-llm needs Python 3.11 or newer; this is Python "
        + ".".join(str(part) for part in sys.version_info[:3])
        + ": make the virtual environment with python3.11 or newer"
    )

from setuptools import setup

setup()

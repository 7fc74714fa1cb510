"""Refuses an old Python in words before pip resolves a dependency that has no
release for it, and gives the package index its long description
(``pyproject.toml`` holds everything else)."""

import re
import sys
from pathlib import Path

if sys.version_info < (3, 11):  # noqa: UP036 - this file runs on the Python pip runs on
    sys.exit(
        "vaelii-llm needs Python 3.11 or newer; this is Python "
        + ".".join(str(part) for part in sys.version_info[:3])
        + ": make the virtual environment with python3.11 or newer"
    )

RELATIVE_LINK = re.compile(r"\[([^\[\]]+)\]\((?![a-zA-Z][a-zA-Z0-9+.-]*:|#)([^)\s]+)\)")
"""A Markdown link to a file of the source tree (no scheme, not an anchor).
Its text holds no bracket, so a ``[`` earlier in the page (a sample output's
``[{...``) never opens it."""


def long_description(readme: str) -> str:
    """The README as an index page shows it. Its links to files of the source
    tree (the guides, the changelog) lead nowhere there, and the package has no
    published home to make them absolute against, so each becomes its text
    followed by the path, which the sdist and a clone both hold."""
    return RELATIVE_LINK.sub(lambda link: f"{link[1]} (`{link[2]}` in the source tree)", readme)


if __name__ == "__main__":  # a build runs it so; a test reads long_description alone
    from setuptools import setup

    setup(
        long_description=long_description(
            Path(__file__).with_name("README.md").read_text(encoding="utf-8")
        ),
        long_description_content_type="text/markdown",
    )

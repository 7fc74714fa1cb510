"""The package's version, written once: ``pyproject.toml`` reads it
(``dynamic = ["version"]``) and everything else imports it."""

__all__ = ["__version__"]

__version__ = "0.1.0"

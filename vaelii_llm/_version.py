"""The package's version, written once: ``pyproject.toml`` reads it
(``dynamic = ["version"]``) and everything else imports it."""

__version__ = "0.1.0"

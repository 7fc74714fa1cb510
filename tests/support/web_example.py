"""examples/web_backend.py, loaded once as a module for every test that
drives it (tests/faces/, tests/real/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PATH = Path(__file__).resolve().parents[2] / "examples" / "web_backend.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_web_backend", PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


web_backend = load()

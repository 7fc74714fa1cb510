"""Every public module's export list, frozen.

A public module is one whose dotted path has no ``_``-prefixed part; every
other module is an implementation detail. A name added to or dropped from any
public ``__all__``, or a public module added or removed, fails here, so the
surface changes only on purpose (httpx's ``tests/test_exported_members.py``
and anyio's ``tests/test_all_attributes.py`` do the same).

Run as a module (``python -m tests.docs.test_exported_members``), it prints the
count of public names per module and in all.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import vaelii_llm
from tests.support.surface import EXPORTS


def public_modules() -> list[str]:
    """The package and every submodule with no private part in its path."""
    found = (info.name for info in pkgutil.walk_packages(vaelii_llm.__path__, "vaelii_llm."))
    return [
        "vaelii_llm",
        *sorted(n for n in found if not any(p.startswith("_") for p in n.split("."))),
    ]


def test_the_public_modules_are_the_frozen_ones() -> None:
    assert public_modules() == sorted(EXPORTS, key=lambda n: (n != "vaelii_llm", n))


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_each_public_export_list_is_frozen(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == EXPORTS[name].split()
    assert len(module.__all__) == len(set(module.__all__)), "a name is listed twice"
    for attr in module.__all__:
        assert getattr(module, attr) is not None


def test_no_public_name_is_private() -> None:
    named = [f"{m}.{n}" for m, names in EXPORTS.items() for n in names.split()]
    assert [
        n for n in named if n.rsplit(".", 1)[1].startswith("_") and not n.endswith("__version__")
    ] == []


if __name__ == "__main__":
    counts = {name: len(names.split()) for name, names in EXPORTS.items()}
    for name, count in counts.items():
        print(f"{count:4d}  {name}")
    print(f"{sum(counts.values()):4d}  public names in {len(counts)} modules")

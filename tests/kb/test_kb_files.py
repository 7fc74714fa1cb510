"""KB files as editors write them (issue 47): a UTF-8 byte-order mark is read
past; a bad byte after it is placed in the file as written.
"""

import codecs
from pathlib import Path

import pytest

from vaelii_llm import kb

# -- also found: a KB file opening with a UTF-8 byte-order mark --------------------------

BOM_KB = "(isa Muffet Dog)\n(in-context CxPets)\n(genls Dog Animal)\n"


def test_a_kb_file_with_a_utf8_byte_order_mark_loads(tmp_path: Path) -> None:
    """Main refused it as "line 1, column 1: the reader stopped here"."""
    marked, plain = tmp_path / "marked.edn", tmp_path / "plain.edn"
    marked.write_bytes(codecs.BOM_UTF8 + BOM_KB.encode())
    plain.write_bytes(BOM_KB.encode())

    def read(base: kb.KB) -> tuple[int, list[str]]:
        return base.counter, sorted(str(term) for term in base.terms)

    written = read(kb.load_edn(plain))
    assert written[0] == 2
    assert read(kb.load_edn(marked)) == written
    assert read(kb.load_edn("\ufeff" + BOM_KB)) == written


def test_a_bad_byte_after_the_mark_is_placed_in_the_file_as_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.edn"
    bad.write_bytes(codecs.BOM_UTF8 + b"(isa Muffet \xff)\n")
    with pytest.raises(kb.EngineRefusal, match="byte 0xff at line 1"):
        kb.load_edn(bad)

"""The README keeps its promises: two commands first, the same config table as the code."""

from __future__ import annotations

import re
from pathlib import Path

from vaelii_llm import config

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_opens_with_exactly_two_commands() -> None:
    block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert block is not None
    assert README.index("```sh") < README.index("## ")
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2
    assert "examples/quickstart.py" in lines[0]
    assert "[test]" in lines[1]
    assert "pytest" in lines[1]


def test_readme_configuration_table_matches_the_code() -> None:
    rows = {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(
            r"^\| `([A-Z_]+)` \| `config\.(\w+)\(\)` \| [^|]* \| ([^|]*) \|", README, re.M
        )
    }
    assert set(rows) == {s.name for s in config.SWITCHES}
    for switch in config.SWITCHES:
        reader, default = rows[switch.name]
        assert reader == switch.reader, switch.name
        if switch.default is not None:
            assert f"`{switch.default}`" in default, switch.name
        else:
            assert default.startswith("unset"), switch.name

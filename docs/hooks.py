"""The documentation site's generated parts, read off the code's own declarations.

- The API reference: one page per public module (a dotted path with no
  ``_``-prefixed part, the rule ``tests/docs/test_exported_members.py`` freezes),
  rendering exactly the names in its ``__all__``; a new public module or name
  appears with no edit here.
- The configuration table (``config.SWITCHES``), the error table (the
  ``errors`` classes and ``ErrorType``) and the command's exit statuses
  (``cli.EXIT_STATUSES``): written between markers in
  ``docs/guides/configuration.md``, ``docs/guides/errors.md`` and
  ``docs/guides/scripts.md``, so they read
  on GitHub and in the sdist too. ``python docs/hooks.py`` rewrites them; the
  build (and ``tests/docs/test_docs.py``) fails while a page is stale.
- Sphinx-style roles in docstrings (``:class:`Response```) become
  cross-references the build checks, through a griffe extension
  (``docs/griffe_roles.py``).

MkDocs loads this file as a hook (``mkdocs.yml``); the tests import it without
MkDocs installed, so MkDocs is imported only inside the hook functions.
"""

from __future__ import annotations

import ast
import pkgutil
import re
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "vaelii_llm"
REFERENCE = "reference"
GUIDES = "guides"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# -- the public surface, read from the source (no optional extra imported) ---------------


def public_modules() -> list[str]:
    """The package and every submodule with no private part in its path."""
    found = (info.name for info in pkgutil.walk_packages([str(PACKAGE)], "vaelii_llm."))
    return [
        "vaelii_llm",
        *sorted(n for n in found if not any(p.startswith("_") for p in n.split("."))),
    ]


def source_of(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def exported(module: str) -> list[str]:
    """The module's ``__all__``, read from its source."""
    tree = ast.parse(source_of(module).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                value = ast.literal_eval(node.value)
                return [str(name) for name in value]
    return []


def members(module: str) -> list[str]:
    """What the module's page renders: its exports, less the submodules (each has a page)."""
    modules = set(public_modules())
    return [name for name in exported(module) if f"{module}.{name}" not in modules]


def reference_path(module: str) -> str:
    return f"{REFERENCE}/{module}.md"


def reference_page(module: str) -> str:
    """The markdown of one reference page."""
    names = members(module)
    listed = "\n".join(f"        - {name}" for name in names) if names else "        []"
    return (
        f"::: {module}\n"
        "    options:\n"
        "      show_root_heading: true\n"
        "      show_root_full_path: true\n"
        "      heading_level: 1\n"
        "      members:\n"
        f"{listed}\n"
    )


def reference_index() -> str:
    """The reference's first page: each public module as a heading of its own
    (a table's narrow first column broke the dotted names mid-word), its public
    names under it."""
    sections = "\n".join(
        f"## [`{m}`]({m}.md)\n\n"
        + (", ".join(f"`{n}`" for n in members(m)) or "(submodules only)")
        + "\n"
        for m in public_modules()
    )
    return (
        "# API reference\n\n"
        "Generated from the docstrings of the public surface: every module whose "
        "dotted path has no `_`-prefixed part, and in each exactly the names in its "
        "`__all__` (frozen by `tests/docs/test_exported_members.py`). Every other module "
        "is private and may change in any release.\n\n" + sections
    )


# -- the generated tables -----------------------------------------------------------------


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("*", "\\*").replace("[", "\\[")


def configuration_table() -> str:
    """One row per ``config.SWITCHES`` entry, in its order; its role (a
    backend's host, hosts, model or key) read from each backend's record
    (:class:`vaelii_llm.providers.Backend`)."""
    from vaelii_llm import _backends
    from vaelii_llm import config

    roles: dict[str, list[str]] = {}
    for backend in _backends.BUILTIN:
        for name, role in backend.switches().items():
            roles.setdefault(name, []).append(f"{backend.kind} ({role})")
    rows = [
        "| Switch | Role | Legal values | Default | What it decides |",
        "|---|---|---|---|---|",
    ]
    for s in config.SWITCHES:
        default = f"`{s.default}`" if s.default is not None else "unset"
        secret = " A secret: shown only as set or unset." if s.secret else ""
        named = ", ".join(roles.get(s.name, ()))
        rows.append(
            f"| `{s.name}` | {named} | {cell(s.legal)} | {default} | {cell(s.decides)}{secret} |"
        )
    return "\n".join(rows)


def error_classes() -> dict[str, type[Exception]]:
    """Each ``ErrorType`` value and the one exported class that carries it."""
    from vaelii_llm import errors

    found: dict[str, type[Exception]] = {}
    for name in errors.__all__:
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.LLMError):
            found[cls.type] = cls
    return found


def error_types() -> list[str]:
    from vaelii_llm import errors

    return list(typing.get_args(errors.ErrorType))


def first_paragraph(doc: str | None) -> str:
    return cell((doc or "").strip().split("\n\n", 1)[0])


def error_table() -> str:
    """One row per ``ErrorType`` value: its class and the class's own summary."""
    classes = error_classes()
    rows = ["| `type` | class | what happened | what to do |", "|---|---|---|---|"]
    for kind in error_types():
        cls = classes[kind]  # a type with no class fails here, and the build with it
        bases = [b.__name__ for b in cls.__mro__[1:] if b.__module__ == cls.__module__]
        under = f" (an `{bases[0]}`)" if bases else ""
        rows.append(
            f"| `{kind}` | [`{cls.__name__}`][vaelii_llm.errors.{cls.__name__}]{under} "
            f"| {first_paragraph(cls.__doc__)} | [what to do](#{kind}) |"
        )
    return "\n".join(rows)


def exit_status_table() -> str:
    """One row per exit status of the command (``cli.EXIT_STATUSES``), in its order."""
    from vaelii_llm import cli

    rows = ["| status | meaning |", "|---|---|"]
    rows += [f"| {status} | {cell(meaning)} |" for status, meaning in cli.EXIT_STATUSES]
    return "\n".join(rows)


TABLES = {
    "configuration table": (f"{GUIDES}/configuration.md", configuration_table),
    "error table": (f"{GUIDES}/errors.md", error_table),
    "exit status table": (f"{GUIDES}/scripts.md", exit_status_table),
}


def marker(name: str) -> tuple[str, str]:
    return (
        f"<!-- generated: {name} (python docs/hooks.py rewrites it) -->",
        f"<!-- end of the generated {name} -->",
    )


def with_table(text: str, name: str, table: str) -> str:
    begin, end = marker(name)
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"the page holds no {name} markers: {begin}")
    return pattern.sub(lambda _: f"{begin}\n{table}\n{end}", text, count=1)


def stale_tables() -> list[str]:
    """The generated tables whose page does not hold what the code declares now."""
    stale = []
    for name, (page, make) in TABLES.items():
        text = (DOCS / page).read_text()
        if with_table(text, name, make()) != text:
            stale.append(f"{page}: the {name} (run python docs/hooks.py)")
    return stale


def write_tables() -> None:
    for name, (page, make) in TABLES.items():
        path = DOCS / page
        path.write_text(with_table(path.read_text(), name, make()))


# -- MkDocs hooks ---------------------------------------------------------------------


def guide_nav(listed: list[Any]) -> list[Any]:
    """The guides in ``mkdocs.yml``'s order, then any other ``docs/guides/*.md`` by
    name, so a guide added by a new feature is in the site without an edit here."""
    named = {next(iter(e.values())) if isinstance(e, dict) else e for e in listed}
    extra = sorted(
        f"{GUIDES}/{p.name}"
        for p in (DOCS / GUIDES).glob("*.md")
        if f"{GUIDES}/{p.name}" not in named
    )
    return [*listed, *extra]


def on_config(config: Any) -> Any:
    from mkdocs.exceptions import PluginError

    stale = stale_tables()
    if stale:
        raise PluginError("generated tables out of date: " + "; ".join(stale))
    nav = config["nav"]
    for entry in nav:
        if isinstance(entry, dict) and "Guides" in entry:
            entry["Guides"] = guide_nav(entry["Guides"])
    nav.append(
        {
            "API reference": [
                f"{REFERENCE}/index.md",
                *({m: reference_path(m)} for m in public_modules()),
            ]
        }
    )
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, f"{REFERENCE}/index.md", content=reference_index()))
    for module in public_modules():
        files.append(File.generated(config, reference_path(module), content=reference_page(module)))
    return files


if __name__ == "__main__":
    write_tables()
    print("rewrote:", ", ".join(page for page, _ in TABLES.values()))

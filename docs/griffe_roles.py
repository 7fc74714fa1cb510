"""A griffe extension: the docstrings' Sphinx-style roles become checked cross-references.

The package's docstrings name each other as ``:class:`Response``` or
``:func:`~vaelii_llm.providers.ollama.provider```. Each role is resolved from
the scope of the object whose docstring holds it:

- a name that resolves to something the reference renders becomes an autorefs
  link to its public path, which the strict build checks;
- a name that resolves to something real the reference does not render (a
  private helper, another library, a builtin) becomes plain code: there is no
  page to link to. Another library is one the package imports anywhere (read
  from the source, so the docs extra need not install an optional extra's
  library such as ``mcp``) or one installed here;
- a name that resolves to nothing stays a link to what was written, so the
  strict build fails on it ("Could not find cross-reference target").

A docstring's ``::`` (reStructuredText's "a literal block follows") becomes ``:``;
the indented block after it is already a code block in Markdown. A
reStructuredText definition list (a term, its definition indented under it) is
one run-on paragraph in Markdown: it becomes a bullet list, ``term: definition``.
"""

from __future__ import annotations

import builtins
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import griffe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hooks import members
from hooks import public_modules

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const):`(?P<body>[^`]+)`")
TITLED = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^>]+)>")
LITERAL = re.compile(r"::(?=\n\s*\n)")
DEFINITION = re.compile(
    r"^(?P<term>[^\s:][^\n]*)\n(?P<body>(?:[ ]{4}\S[^\n]*(?:\n|$))+)", re.MULTILINE
)


class RolesToRefs(griffe.Extension):
    """Rewrites every docstring once the whole package is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "vaelii_llm":
            return
        rendered = public_paths(pkg)
        found = walk(pkg)
        libraries = imported_libraries(found)
        for obj in found:
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj, obj.docstring.value, pkg, rendered, libraries)


def imported_libraries(objects: list[griffe.Object]) -> frozenset[str]:
    """The top-level names of every library the package's modules import."""
    heads = {
        target.split(".")[0] for obj in objects if obj.is_module for target in obj.imports.values()
    }
    return frozenset(heads - {"vaelii_llm"})


def walk(obj: griffe.Object) -> list[griffe.Object]:
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias and member.parent is obj:
            found.extend(walk(member))  # type: ignore[arg-type]
    return found


def public_paths(pkg: griffe.Module) -> dict[str, str]:
    """Canonical path -> the public path the reference renders it under."""
    paths: dict[str, str] = {}
    for module in public_modules():
        node = pkg if module == "vaelii_llm" else pkg[module.removeprefix("vaelii_llm.")]
        paths[module] = module
        paths[node.canonical_path] = module
        for name in members(module):
            member = node.members[name]
            public = f"{module}.{name}"
            target = member.final_target if isinstance(member, griffe.Alias) else member
            paths.setdefault(target.canonical_path, public)
            paths[public] = public
            for sub, inner in getattr(target, "members", {}).items():
                if sub.startswith("_") or inner.is_alias or not inner.docstring:
                    continue
                paths.setdefault(f"{target.canonical_path}.{sub}", f"{public}.{sub}")
                paths[f"{public}.{sub}"] = f"{public}.{sub}"
    return paths


def exists(pkg: griffe.Module, path: str) -> bool:
    if path == "vaelii_llm":
        return True
    if not path.startswith("vaelii_llm."):
        return False
    try:
        pkg[path.removeprefix("vaelii_llm.")]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False
    return True


def resolve(obj: griffe.Object, target: str) -> str | None:
    """The full path ``target`` names from ``obj``'s scope, or None."""
    if target.startswith("vaelii_llm"):
        return target
    if target.startswith("."):  # relative to the module's package
        package = obj.module if obj.module.is_init_module else obj.module.parent
        return f"{package.path if package else 'vaelii_llm'}{target}"
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:  # Python's scopes: the object, its class, its module
        if head in scope.members or head in getattr(scope, "imports", {}):
            found = scope.resolve(head)
            return f"{found}.{rest}" if rest else found
        if scope.is_module:
            break
        scope = scope.parent
    return None


def rewrite(
    obj: griffe.Object,
    text: str,
    pkg: griffe.Module,
    rendered: dict[str, str],
    libraries: frozenset[str],
) -> str:
    def one(match: re.Match[str]) -> str:
        body = match.group("body").strip()
        titled = TITLED.fullmatch(body)
        if titled:
            title, target = titled.group("title"), titled.group("target")
        else:
            target = body.lstrip("~")
            title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
        path = resolve(obj, target)
        if path is None:
            head = target.split(".")[0]
            if head in dir(builtins) or head in libraries or importlib.util.find_spec(head):
                return f"`{title}`"  # a builtin, or another library's
            return f"[`{title}`][{target}]"  # nothing by that name: the build says so
        if path in rendered:
            return f"[`{title}`][{rendered[path]}]"
        if path.startswith("vaelii_llm") and not exists(pkg, path):
            return f"[`{title}`][{path}]"  # a vaelii_llm name that is not there
        return f"`{title}`"

    return definitions(LITERAL.sub(":", ROLE.sub(one, text)))


def definitions(text: str) -> str:
    def item(match: re.Match[str]) -> str:
        body = " ".join(match.group("body").split())
        return f"\n- {match.group('term').rstrip()}: {body}\n"

    return DEFINITION.sub(item, text)

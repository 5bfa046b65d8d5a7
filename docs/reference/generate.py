"""MkDocs hook: the API reference, generated from the package's ``__all__`` lists at build time.

``mkdocs.yml`` loads this file (``hooks:``). It writes no file to disk: it adds virtual pages to the build.

- one page per public module: every subpackage of ``iclr24`` (found on disk, so a new method gets its page) and
  the submodules in ``STANDALONE`` (public modules whose names their package does not re-export);
- on each page, the module's docstring and then one mkdocstrings block (``::: path``) per name in its ``__all__``,
  in ``__all__``'s order, so a new public name appears in the reference with no edit here;
- ``reference/index.md`` (the modules and their one-line summaries), the "API reference" section of the nav, and
  a home page (``index.md``) when ``docs/`` has none.

``__all__`` is read statically (``ast``), so the build imports neither torch nor any extra. It may hold string
literals and ``*NAME`` where ``NAME`` is a module-level literal list, tuple, set or dict of strings (the lazy
exports of ``holonets``, ``federated`` and ``meta_vbo``). A name the package binds (``import``, ``def``,
``class``, assignment) is documented as ``iclr24.<package>.<name>``; a name it serves lazily (module
``__getattr__``) is documented where it is defined: the one submodule whose ``__all__`` lists it. Anything else
(an ``__all__`` this cannot read, a name found in no submodule or in two) stops the build with an error, so no
name is left out silently. ``tests/test_docs_build.py`` checks the result against the runtime ``__all__``.

Two adjustments to how docstrings render, both logged:

- A doctest outside an ``Examples`` section (``>>>`` at the start of a line) becomes a ``pycon`` code block.
  Markdown would otherwise read ``>>>`` as three nested block quotes, and ``[...]`` followed by an output line
  ``['a', 'b']`` as a reference link to a missing target.
- griffe's docstring-style warnings ("No type or annotation for parameter", "Parameter 'a, b' does not appear in
  the function signature", ...) are logged at INFO, not WARNING: they describe how a docstring's sections parse,
  not a broken link or reference, so ``--strict`` does not fail on them; they still appear in the build's log.
  Broken links, missing pages and unresolved cross-references stay warnings, which ``--strict`` turns into errors.
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

from markdown import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

PACKAGE = "iclr24"
SRC = Path(__file__).resolve().parents[2] / "src" / PACKAGE
#: Shared packages first, in this order; the method packages follow in registry order (core/methods.py).
SHARED = ("core", "sandbox", "llm", "interp")
#: Public submodules documented on a page of their own: modules users import by this name because their package
#: re-exports only part of them (``pool``, ``tally``, ``forest_plot``; differential scoring).
STANDALONE = ("core.evidence", "sandbox.calls")
SECTION = "API reference"

_LITERALS = (ast.List, ast.Tuple, ast.Set)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _statements(body: list[ast.stmt]):
    """Module-level statements, including those inside top-level ``if`` / ``try`` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _statements(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _statements(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                yield from _statements(handler.body)


def _strings(node: ast.expr, where: str) -> list[str]:
    if isinstance(node, ast.Dict):
        items = node.keys
    elif isinstance(node, _LITERALS):
        items = node.elts
    else:
        raise ValueError(f"{where}: expected a literal list, tuple, set or dict of strings")
    if not all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
        raise ValueError(f"{where}: expected strings only")
    return [i.value for i in items]


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def module_exports(path: Path, required: bool = True) -> tuple[list[str], set[str]]:
    """``(__all__, names bound at module level)`` of the module at ``path``, read without importing it.

    A module with no ``__all__`` is an error, or exports nothing when not ``required``."""
    tree = _parse(path)
    literals: dict[str, ast.expr] = {}
    bound: set[str] = set()
    exports: list[str] | None = None
    for node in _statements(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        for name in _targets(node):
            value = node.value
            if name != "__all__":
                bound.add(name)
                if value is not None:
                    literals[name] = value
                continue
            where = f"{path}: __all__"
            if not isinstance(value, _LITERALS):
                raise ValueError(f"{where}: expected a literal list or tuple")
            found: list[str] = []
            for item in value.elts:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    found.append(item.value)
                elif isinstance(item, ast.Starred) and isinstance(item.value, ast.Name) and item.value.id in literals:
                    found += _strings(literals[item.value.id], f"{where}: *{item.value.id}")
                else:
                    raise ValueError(f"{where}: cannot read {ast.unparse(item)!r} statically")
            exports = found if not isinstance(node, ast.AugAssign) else (exports or []) + found
    if exports is None and required:
        raise ValueError(f"{path}: no __all__")
    return exports or [], bound


def _source(dotted: str) -> Path:
    """The file of ``iclr24.<dotted>`` (a package's ``__init__.py`` or a module)."""
    path = SRC.joinpath(*dotted.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _defining_module(package: str, name: str) -> str:
    """The one submodule of ``package`` whose ``__all__`` lists ``name`` (for names served lazily)."""
    hits = []
    for path in sorted(_source(package).parent.glob("*.py")):
        if path.name != "__init__.py" and name in module_exports(path, required=False)[0]:
            hits.append(f"{package}.{path.stem}")
    if len(hits) != 1:
        raise ValueError(f"{PACKAGE}.{package}.__all__ lists {name!r}, which the package does not bind and "
                         f"{'no submodule' if not hits else 'several submodules (' + ', '.join(hits) + ')'} exports")
    return hits[0]


def public_modules() -> list[str]:
    """The documented modules, relative to ``iclr24``: shared packages, methods, standalone submodules."""
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    methods = ast.literal_eval(next(
        n.value for n in _parse(SRC / "core" / "methods.py").body
        if isinstance(n, ast.AnnAssign) and n.target.id == "METHOD_PACKAGES"))
    unlisted = sorted(packages - set(SHARED) - set(methods))  # a package in neither list still gets its page
    order = [*SHARED, *methods, *unlisted]
    modules = []
    for package in order:
        modules.append(package)
        modules += [m for m in STANDALONE if m.rsplit(".", 1)[0] == package]
    return modules


def reference_paths(module: str) -> list[str]:
    """The dotted path documented for each name in ``iclr24.<module>.__all__``, in order."""
    exports, bound = module_exports(_source(module))
    is_package = _source(module).name == "__init__.py"
    paths = []
    for name in exports:
        owner = module if name in bound or not is_package else _defining_module(module, name)
        paths.append(f"{PACKAGE}.{owner}.{name}")
    return paths


def _summary(module: str) -> str:
    doc = ast.get_docstring(_parse(_source(module))) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


def module_page(module: str) -> str:
    full = f"{PACKAGE}.{module}"
    lines = [f"# `{full}`", "", f"::: {full}", "    options:", "      show_root_heading: false", "      members: false",
             ""]
    for path in reference_paths(module):
        lines += [f"::: {path}", ""]
    return "\n".join(lines)


def _page_path(module: str) -> str:
    return f"reference/{PACKAGE}.{module}.md"


def index_page(modules: list[str]) -> str:
    lines = [f"# {SECTION}", "",
             "One page per public module, listing every name in its `__all__`. Generated at build time by "
             "`docs/reference/generate.py` (run `mkdocs serve` at the repository root to browse it).", "",
             "| module | summary |", "| --- | --- |"]
    for module in modules:
        summary = _summary(module).replace("|", "\\|")
        lines.append(f"| [`{PACKAGE}.{module}`]({PACKAGE}.{module}.md) | {summary} |")
    return "\n".join(lines) + "\n"


def home_page() -> str:
    doc = ast.get_docstring(_parse(SRC / "__init__.py")) or PACKAGE
    return (f"# {PACKAGE}\n\n{doc}\n\nThe user guide is the list of pages on the left; "
            f"the [{SECTION}](reference/index.md) documents every public name.\n")


class _DoctestBlocks(Preprocessor):
    """Fence each run of doctest lines (``>>>`` at column 0, up to the next blank line) as ``pycon``."""

    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        fence = None  # the opening fence of the code block we are in, if any
        in_doctest = False
        for line in lines:
            marker = re.match(r"\s*(`{3,}|~{3,})", line)
            if in_doctest and not line.strip():
                out += ["```", ""]
                in_doctest = False
            if fence is None and not in_doctest and line.startswith(">>>"):
                out += ["", "```pycon"]
                in_doctest = True
            elif not in_doctest and marker:
                if fence is None:
                    fence = marker.group(1)
                elif marker.group(1).startswith(fence):
                    fence = None
            out.append(line)
        if in_doctest:
            out += ["```", ""]
        return out


class DoctestBlocks(Extension):
    def extendMarkdown(self, md):  # noqa: N802 (Python-Markdown's name)
        # Before fenced_code (priority 25), which must see the fences added here.
        md.preprocessors.register(_DoctestBlocks(md), "iclr24_doctest_blocks", 27)


_DOCSTRING_WARNING = re.compile(r"(griffe: )?\S+\.py:\d+: ")  # mkdocs prefixes the logger name


def _docstring_warnings_as_info(record: logging.LogRecord) -> bool:
    if record.levelno == logging.WARNING and _DOCSTRING_WARNING.match(record.getMessage()):
        record.levelno, record.levelname = logging.INFO, "INFO"
    return True


@event_priority(100)  # before mkdocstrings builds its handlers from the Markdown extensions
def on_config(config):
    if not any(isinstance(e, DoctestBlocks) for e in config.markdown_extensions):
        config.markdown_extensions.append(DoctestBlocks())
    griffe_log = logging.getLogger("mkdocs.plugins.griffe")
    if not any(getattr(f, "__name__", None) == _docstring_warnings_as_info.__name__ for f in griffe_log.filters):
        griffe_log.addFilter(_docstring_warnings_as_info)  # once per process (`mkdocs serve` reloads this hook)
    modules = public_modules()
    section = [{"Overview": "reference/index.md"}] + [{f"{PACKAGE}.{m}": _page_path(m)} for m in modules]
    nav = list(config.nav or [])
    if not any(isinstance(item, dict) and "index.md" in item.values() for item in nav):
        nav.insert(0, {"Home": "index.md"})
    config.nav = nav + [{SECTION: section}]
    return config


def on_files(files, config):
    modules = public_modules()
    pages = {"reference/index.md": index_page(modules), **{_page_path(m): module_page(m) for m in modules}}
    if files.get_file_from_path("index.md") is None:
        pages["index.md"] = home_page()
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files

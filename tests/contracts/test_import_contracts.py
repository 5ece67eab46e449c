"""Import contracts import-linter cannot state, checked on the source (AST, nothing is imported).

The layers (kernel below everything, the three processes apart, each package's own floors, submitters
never importing the gateway or the renderer) are ``[tool.importlinter]`` contracts in pyproject.toml,
kept by import-linter in ``tests/contracts/test_gates.py``. Here:

- pure modules reach no I/O library (nats, sqlite, redis, Kubernetes, HTTP server, subprocess), not even
  through the project modules they import; a module declares itself pure in its own source (``__pure__ = True``,
  see PURE_MARKER), and backends' ``parse`` modules are pure by their name;
- nothing imports the CLI (the top ``interlink_nats`` package and every ``*.cli`` module) but entry points;
- no two of our modules import each other, directly or in a loop.

Type-only imports (under ``if TYPE_CHECKING:``) count: they are dependencies a reader has to follow too.
Every exception is listed in ``ALLOWED`` below, with the reason; none is skipped silently.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = "interlink_nats"

BACKEND_PARSERS = tuple(
    f"{TOP}.submitters.backends.{path.parent.name}.parse"
    for path in sorted((ROOT / "submitters" / "backends").glob("*/parse.py"))
)
"""Every backend's ``parse`` module (its batch system's text, table-tested) is pure by rule: found by its name,
so a new backend's parser is held pure without declaring anything."""

PURE_MARKER = "__pure__"
"""A module is pure when its own source says so: a module-level ``__pure__ = True`` (in a package's
``__init__.py`` it covers the whole package but its ``cli``). Why a constant and not a docstring phrase or a list
here: the promise sits where the next editor of the module reads it, one exact statement the AST finds without
guessing (docstrings say "pure" loosely, and a list in a test is the one place nobody looks when adding a module);
a module that starts doing I/O fails this test until its line goes."""
IO_LIBRARIES = frozenset({"nats", "sqlite3", "aiosqlite", "redis", "lightkube", "starlette", "subprocess"})

# Violations that exist on this branch and are being removed elsewhere. The coordinator empties this list
# once the work removing them is merged; an entry that no longer occurs fails the test, so the
# list can only shrink. Format: (importer, imported) as module names.
ALLOWED: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


def package_folders() -> dict[str, Path]:
    """Our import packages and their folders (from pyproject), generated code left out."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {package: ROOT / folder for package, folder in mapping.items() if package != f"{TOP}.gen"}


@cache
def module_files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package, folder in package_folders().items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("").parts
            if package == TOP and len(rel) > 1:
                continue  # the other mapped folders are listed on their own
            parts = [*package.split("."), *rel]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def is_package(module: str) -> bool:
    return module_files()[module].name == "__init__.py"


def resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package(importer):
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


@cache
def imports_of(module: str) -> tuple[Import, ...]:
    """Every import statement of ``module`` (module level, in functions, under TYPE_CHECKING)."""
    tree = ast.parse(module_files()[module].read_text(encoding="utf-8"))
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                # `from pkg import module` imports the module; `from module import name` the module itself
                found.append(Import(module, sub if sub in module_files() else target, node.lineno))
    return tuple(found)


def ours(name: str) -> bool:
    return name == TOP or name.startswith(TOP + ".")


def project_imports(module: str) -> Iterator[Import]:
    for imp in imports_of(module):
        if ours(imp.imported) and not imp.imported.startswith(f"{TOP}.gen"):
            yield imp


@cache
def reachable(module: str) -> frozenset[str]:
    """Our modules that importing ``module`` runs: its imports, their parent packages, and so on."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen or current not in module_files():
            continue
        seen.add(current)
        parts = current.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += [imp.imported for imp in project_imports(current)]
    return frozenset(seen)


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def declares_pure(tree: ast.Module) -> bool:
    """Whether a module's top level assigns ``__pure__ = True``."""
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(target, ast.Name) and target.id == PURE_MARKER for target in node.targets)
        and isinstance(node.value, ast.Constant)
        and node.value.value is True
        for node in tree.body
    )


@cache
def declared_pure() -> frozenset[str]:
    """The modules and packages whose source declares them pure."""
    return frozenset(
        module for module, path in module_files().items() if declares_pure(ast.parse(path.read_text(encoding="utf-8")))
    )


def pure_modules() -> list[str]:
    roots = declared_pure() | set(BACKEND_PARSERS)
    return sorted(m for m in module_files() if any(within(m, root) for root in roots) and not m.endswith(".cli"))


def io_imports(module: str) -> list[str]:
    """Where ``module``, or a module of ours it reaches, imports an I/O library."""
    bad = []
    for dependency in sorted(reachable(module)):
        for imp in imports_of(dependency):
            if imp.imported.split(".")[0] in IO_LIBRARIES:
                via = "" if dependency == module else f" (through {dependency})"
                bad.append(f"{module}{via}: {dependency}:{imp.line} imports {imp.imported}")
    return bad


def test_pure_modules_reach_no_io_library() -> None:
    bad = [line for module in pure_modules() for line in io_imports(module)]
    assert not bad, "pure modules must do no I/O:\n" + "\n".join(bad)


def test_the_purity_checker_sees_a_declaration_and_a_violation() -> None:
    """Both halves can fail: the marker is read from real sources and an I/O import is found behind it."""
    assert declares_pure(ast.parse('"""Doc."""\n\nimport json\n\n__pure__ = True\n'))
    assert not declares_pure(ast.parse('"""Pure: the word in a docstring declares nothing."""\n__pure__ = False\n'))
    assert {f"{TOP}.kernel.clock", f"{TOP}.submitters.core", f"{TOP}.services.scripts"} <= declared_pure()
    assert f"{TOP}.submitters.core.lifecycle" in pure_modules()  # a package's marker covers its modules
    assert not any(m.endswith(".cli") for m in pure_modules())
    # a module of ours that does I/O (the submitter's NATS runtime) is reported, with the line of the import
    runtime = f"{TOP}.submitters.runtime"
    assert any(f"{runtime}:" in line and "imports nats" in line for line in io_imports(runtime)), io_imports(runtime)


def violations() -> set[tuple[str, str]]:
    found = set()
    modules = module_files()
    for module in modules:
        for imp in project_imports(module):
            target = imp.imported
            if is_cli(target) and not is_cli(module):
                found.add((module, target))
    found |= {edge for cycle in cycles() for edge in cycle}
    return found


def is_cli(module: str) -> bool:
    """The CLI: the top package and its own folder (the console script's home), and every ``cli`` module."""
    path = module_files().get(module)
    return module.rsplit(".", 1)[-1] == "cli" or (path is not None and path.parent == ROOT / TOP)


def cycles() -> list[list[tuple[str, str]]]:
    """Import cycles among our modules, as lists of edges (Tarjan's strongly connected components)."""
    graph = {
        m: sorted({i.imported for i in project_imports(m) if i.imported in module_files()}) for m in module_files()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in graph:
        if node not in index:
            visit(node)
    out = []
    for component in components:
        if len(component) > 1:
            out.append(sorted((a, b) for a in component for b in graph[a] if b in component))
    return out


def test_layers_cli_and_cycles() -> None:
    found = violations()
    new = sorted(found - ALLOWED)
    assert not new, "import contracts broken (see this module's docstring):\n" + "\n".join(
        f"{a} imports {b}" for a, b in new
    )
    stale = sorted(ALLOWED - found)
    assert not stale, "ALLOWED lists imports that no longer exist; remove them:\n" + "\n".join(map(str, stale))


def test_the_checker_sees_a_violation() -> None:
    """The contract code must be able to fail: a relative import of the CLI package is found and resolved."""
    module = f"{TOP}.services.bus.rpc.server"
    tree = ast.parse("from .... import __version__\nfrom ... import scripts\n")
    froms = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert [resolve(module, n) for n in froms] == [TOP, f"{TOP}.services"]
    assert is_cli(TOP) and is_cli(f"{TOP}.submitters.cli") and not is_cli(f"{TOP}.submitters.runtime")
    assert reachable(f"{TOP}.kernel.subjects") >= {f"{TOP}.kernel.names", f"{TOP}.kernel", TOP}


def declared_distributions() -> tuple[set[str], set[str]]:
    """(runtime dependencies incl. extras but dev, dev dependencies), names normalised as in PEP 503."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {normalise(re.split(r"[\[<>=!~;\s]", req, maxsplit=1)[0]) for req in requirements}

    extras = project.get("optional-dependencies", {})
    runtime = names(project["dependencies"]) | {n for k, v in extras.items() if k != "dev" for n in names(v)}
    return runtime, names(extras.get("dev", []))


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party_imports(files: list[Path], local: set[str]) -> dict[str, set[str]]:
    """Top-level import name → files importing it, for everything not ours, not stdlib, not a local helper."""
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top != TOP and top not in sys.stdlib_module_names and top not in local:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_library_is_declared() -> None:
    """A library we import must be a dependency of ours, not something another dependency happens to pull."""
    runtime, dev = declared_distributions()
    distributions = importlib.metadata.packages_distributions()
    test_files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/*.py")]
    checks = [
        (list(module_files().values()), set(), runtime),
        # tests import their own helpers by name, and the conformance kit's package by its folder
        (test_files, {p.stem for p in test_files} | {p.parent.name for p in test_files}, runtime | dev),
    ]
    missing = []
    for files, local, declared in checks:
        for top, users in sorted(third_party_imports(files, local).items()):
            provided_by = {normalise(d) for d in distributions.get(top, [top])}
            if not provided_by & declared:
                missing.append(f"{top} (from {sorted(provided_by)}) imported by {sorted(users)[:3]}")
    assert not missing, "declare these in pyproject.toml:\n" + "\n".join(missing)


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return list(config["contracts"])


def layer_members(layers: list[str]) -> set[str]:
    """The names a ``layers`` contract places (``|`` and ``:`` both separate siblings)."""
    return {name.strip() for layer in layers for name in re.split(r"[|:]", layer)}


def children(container: str) -> set[str]:
    """The modules and subpackages directly inside ``container``, by the names a contract uses."""
    depth = container.count(".") + 1
    return {
        module.split(".")[depth]
        for module in module_files()
        if module.startswith(container + ".") and module.count(".") >= depth
    }


def test_every_module_of_a_layered_package_is_in_a_layer_of_its_contract() -> None:
    """A module left out of its folder's layers is free to import anything: its direction would go unchecked."""
    unplaced: list[str] = []
    for contract in contracts():
        if contract["type"] != "layers" or not contract.get("containers"):
            continue
        placed = layer_members(list(contract["layers"]))  # type: ignore[call-overload]
        for container in contract["containers"]:  # type: ignore[attr-defined]
            unplaced += [f"{container}.{name} (contract {contract['id']!r})" for name in children(container) - placed]
    assert not unplaced, "add each to a layer of its contract in pyproject.toml:\n" + "\n".join(sorted(unplaced))


def test_the_backends_independence_contract_lists_every_backend_package() -> None:
    """Derived, not remembered: every package under submitters/backends/ is a backend and must not know the others."""
    backends = f"{TOP}.submitters.backends"
    packages = {f"{backends}.{name}" for name in children(backends) if is_package(f"{backends}.{name}")}
    (independence,) = [c for c in contracts() if c["id"] == "backends"]
    assert set(independence["modules"]) == packages, (  # type: ignore[call-overload]
        f"pyproject's 'backends' contract must list exactly the backend packages: {sorted(packages)}"
    )


def test_every_backends_parse_module_is_held_pure_by_its_name() -> None:
    """``backends/<name>/parse.py`` is held pure by the pattern: a new backend's parser is checked undeclared."""
    assert {"slurm", "htcondor"} <= {name.split(".")[-2] for name in BACKEND_PARSERS}, BACKEND_PARSERS
    assert set(BACKEND_PARSERS) <= set(pure_modules())

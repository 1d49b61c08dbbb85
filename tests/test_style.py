"""The house rules a reader relies on, checked over the source's syntax trees: modules of one job
(at most 400 lines), functions of one step (at most 60 lines, docstring included), and no private
name used across modules (``from m import _x``, ``m._x``, or ``obj._x`` where ``_x`` is defined in
another module). NamedTuple's own ``_make`` / ``_replace`` / ``_fields`` / ``_asdict`` are public
API despite their underscore, and a package's ``__init__`` / ``__main__`` may import its own
private modules (``from . import _moved``).

``KNOWN`` lists what does not keep the rules yet: a new breach fails, and so does an entry that
no longer breaks a rule (remove it), so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
FOLDERS = ("simshard", "runtime", "programs")  # runtime/ and programs/ install inside simshard/
MODULE_LINES, FUNCTION_LINES = 400, 60
NAMEDTUPLE_API = frozenset({"_make", "_replace", "_fields", "_asdict", "_field_defaults"})

# what does not keep the rules yet: "path" (a long module), "path:function" (a long function),
# "path: private <name>" (a private name used across modules)
KNOWN: frozenset[str] = frozenset()


def sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def own_simshard(module: str | None, level: int) -> bool:
    """Whether an import names a module of this project (relative, or under ``simshard``)."""
    return level > 0 or (module or "").split(".")[0] == "simshard"


def defined_privates(tree: ast.Module) -> set[str]:
    """Every private name a module defines: functions, classes, assignments, attributes it sets."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)  # its own objects' attributes (setting another's is a reach too)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    names |= {t for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
              for t in [node.value] if t.startswith("_")}  # __slots__ entries
    return {n for n in names if n.startswith("_")}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API


def breaches(path: Path) -> set[str]:
    text = path.read_text()
    tree = ast.parse(text)
    where = relative(path)
    found = set()
    if len(text.splitlines()) > MODULE_LINES:
        found.add(where)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                found.add(f"{where}:{node.name}")
    modules = {}  # local name -> whether it is one of this project's modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                face = path.name in ("__init__.py", "__main__.py") and node.level == 1 and node.module is None
                if private(alias.name) and own_simshard(node.module, node.level) and not face:
                    found.add(f"{where}: private {alias.name}")
                modules[alias.asname or alias.name] = own_simshard(node.module, node.level)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                modules[(alias.asname or alias.name).split(".")[0]] = own_simshard(alias.name, 0)
    own = defined_privates(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and private(node.attr)):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue
        if isinstance(base, ast.Name) and base.id in modules:
            if modules[base.id]:
                found.add(f"{where}: private {node.attr}")
            continue  # another library's private name is that library's business
        if node.attr not in own:
            found.add(f"{where}: private {node.attr}")
    return found


@pytest.fixture(scope="module")
def all_breaches() -> set[str]:
    return set().union(*(breaches(p) for p in sources()))


def test_no_new_breach_of_the_house_rules(all_breaches):
    new = sorted(all_breaches - KNOWN)
    assert not new, "breaches of the house rules (see this module's docstring):\n" + "\n".join(new)


def test_the_list_of_known_breaches_only_shrinks(all_breaches):
    kept = sorted(KNOWN - all_breaches)
    assert not kept, "these keep the rules now: remove them from KNOWN\n" + "\n".join(kept)


def test_the_check_sees_a_private_reach_and_a_long_function(tmp_path):
    """The check can fail: a module that reaches another's private name, and a long function."""
    bad = tmp_path / "simshard" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("from simshard.tracing import lowering\nfrom .ops import _checks\n\n\ndef f(x):\n"
                   "    return lowering._sum(x, other._hidden)\n" + "    x = 1\n" * 60)
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = breaches(bad)
    finally:
        ROOT = saved
    assert found == {"simshard/bad.py: private _checks", "simshard/bad.py: private _sum",
                     "simshard/bad.py: private _hidden", "simshard/bad.py:f"}

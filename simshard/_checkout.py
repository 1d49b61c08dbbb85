"""Running from a source checkout without installing it (``PYTHONPATH=<checkout> python -m simshard``).

pyproject.toml maps the checkout's top-level ``runtime/`` and ``programs/`` folders to
``simshard.runtime`` and ``simshard.programs`` (package-dir); only an install sees that mapping.
When ``simshard`` itself was imported from a checkout, ``use_checkout_packages`` loads those two
packages from the same checkout, so the command never mixes this checkout's compiler with
another checkout's runtime (an editable install elsewhere) or fails to find them (no install).
Under an install of this very checkout, or a wheel, it changes nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

MAPPED = (("runtime", "runtime"), ("programs", "programs"))  # simshard.<package> <- <checkout>/<folder>


def checkout_root() -> Path | None:
    """The checkout ``simshard`` was imported from, or None (an installed copy)."""
    import simshard

    root = Path(simshard.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "simshard"' in pyproject.read_text():
        return root
    return None


def use_checkout_packages() -> None:
    """Bind ``simshard.runtime`` / ``simshard.programs`` to this checkout's folders (see module doc)."""
    import simshard

    root = checkout_root()
    if root is None:
        return
    for package, folder in MAPPED:
        name = f"simshard.{package}"
        init = root / folder / "__init__.py"
        if name in sys.modules or not init.is_file():
            continue
        found = importlib.util.find_spec(name)
        if found is not None and found.origin and Path(found.origin).resolve() == init.resolve():
            continue  # an install of this checkout already maps it here
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        setattr(simshard, package, module)

"""Module paths from before the split into stage packages still import (simshard/_moved.py)."""

import importlib
import subprocess
import sys
import warnings

import pytest

import simshard as ss
from simshard._moved import MOVED, SHADOWED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_is_the_new_module_with_a_warning(old):
    # a fresh interpreter: this one may have imported the old path already
    parent = old.rpartition(".")[0]
    code = f"""
import warnings, importlib
import simshard
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    importlib.import_module({parent!r})  # a moved parent warns about itself first
warnings.simplefilter("error")
try:
    importlib.import_module({old!r})
except DeprecationWarning as w:
    print(w)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if old in SHADOWED:
        assert out.stdout == ""  # entered up front, like before the move
    else:
        assert out.stdout.strip() == f"{old} moved to {MOVED[old]}; import it from there"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__.name == MOVED[old]


def test_a_moved_package_brings_its_submodules():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from simshard.explicit.api import typeof
        from simshard.explicit.scatter import update_slice
    from simshard.tracing import scatter
    from simshard.tracing.explicit import api

    assert update_slice is scatter.update_slice

    assert typeof is api.typeof
    assert sys.modules["simshard.explicit.api"] is api


def test_functions_of_the_root_keep_their_names():
    """``ss.trace``, ``ss.layout`` and ``ss.show`` are functions, also after importing the old modules."""
    import simshard.layout  # noqa: F401
    import simshard.show  # noqa: F401
    from simshard.trace import TraceError, Tracer  # noqa: F401

    assert callable(ss.trace) and callable(ss.layout) and callable(ss.show)
    assert TraceError is ss.TraceError


def test_an_unknown_path_is_still_unknown():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("simshard.no_such_module")

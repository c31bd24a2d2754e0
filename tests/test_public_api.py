"""The public API is explicit: __all__ names exactly what the package exports, all importable."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil

import tracker_saver


def test_all_is_sorted_complete_and_importable() -> None:
    assert tracker_saver.__all__ == sorted(tracker_saver.__all__)
    for name in tracker_saver.__all__:
        assert getattr(tracker_saver, name) is not None
    exported = {n for n, v in vars(tracker_saver).items() if not n.startswith("_") and not inspect.ismodule(v)}
    assert exported == set(tracker_saver.__all__)


def test_no_submodule_is_named_like_a_lazy_export() -> None:
    """Importing ``tracker_saver.resume`` (a module, once) bound it over the lazily loaded function:
    ``from tracker_saver.resume import …`` then ``tracker_saver.resume(...)`` failed."""
    for name in tracker_saver._LAZY:
        assert importlib.util.find_spec(f"tracker_saver.{name}") is None, name
        module = importlib.import_module(tracker_saver._LAZY[name])
        assert getattr(tracker_saver, name) is getattr(module, name)


def test_every_module_declares_all_and_a_docstring() -> None:
    for info in pkgutil.walk_packages(tracker_saver.__path__, "tracker_saver."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        assert module.__doc__, info.name
        assert hasattr(module, "__all__"), info.name
        for name in module.__all__:
            assert hasattr(module, name), f"{info.name}.{name}"

"""The optional extras and the one install hint each: what to ``pip install`` when an import fails.

tracker-saver is on no package index, so a hint names the extra's own requirements, pinned
as ``pyproject.toml`` pins them (``tests/test_install_hints.py`` compares the two).

Examples:
    >>> install_hint("registry='mlflow'", "mlflow")
    "registry='mlflow' needs mlflow: pip install 'mlflow>=3.9,<4' (the mlflow extra)"
"""

from __future__ import annotations

import importlib

__all__ = ["EXTRAS", "install_hint", "missing_extra", "require"]

#: Each extra's requirements, as pyproject.toml's ``[project.optional-dependencies]`` pins them.
EXTRAS: dict[str, tuple[str, ...]] = {
    "s3": ("boto3>=1.38.22",),
    "clearml": ("clearml>=1.16,<3",),
    "ui": ("fastapi>=0.110.1", "uvicorn>=0.30"),
    "mlflow": ("mlflow>=3.9,<4",),
}

#: The modules each extra brings: importing them is how an extra is found to be installed.
MODULES: dict[str, tuple[str, ...]] = {
    "s3": ("boto3",),
    "clearml": ("clearml",),
    "ui": ("fastapi", "uvicorn"),
    "mlflow": ("mlflow",),
}


def install_hint(what: str, extra: str) -> str:
    """``"<what> needs <packages>: pip install '<req>' … (the <extra> extra)"``."""
    wanted = " ".join(f"'{req}'" for req in EXTRAS[extra])
    return f"{what} needs {' and '.join(MODULES[extra])}: pip install {wanted} (the {extra} extra)"


def missing_extra(what: str, extra: str, exc: ModuleNotFoundError) -> ModuleNotFoundError:
    """The ``ModuleNotFoundError`` to raise ``from exc`` (which names the missing module) when ``extra`` is not installed.

    Examples:
        >>> str(missing_extra("an s3:// output_uri", "s3", ModuleNotFoundError("No module named 'boto3'")))
        "an s3:// output_uri needs boto3: pip install 'boto3>=1.38.22' (the s3 extra)"
    """
    return ModuleNotFoundError(install_hint(what, extra), name=exc.name)


def require(extra: str, what: str) -> None:
    """Import ``extra``'s modules, or raise :func:`missing_extra`'s error for ``what`` needs them.

    Examples:
        >>> require("s3", "an s3:// output_uri")   # boto3 is installed: nothing happens
    """
    for module in MODULES[extra]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise  # the extra is there, and something it imports is not: not ours to word
            raise missing_extra(what, extra, exc) from exc

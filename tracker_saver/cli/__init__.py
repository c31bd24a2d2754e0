"""The ``tracker-saver`` command: a thin layer over the public API (the console entry point is ``main``)."""

from tracker_saver.cli.main import main

__all__ = ["main"]

"""``python -m tracker_saver`` runs the ``tracker-saver`` command."""

from tracker_saver.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m tests.clearml_standin [--port N]``."""

from __future__ import annotations

from tests.clearml_standin.common import ACCESS_KEY, SECRET_KEY
from tests.clearml_standin.server import ClearMLStandIn


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.clearml_standin [--port N]``: a first look at ClearML without a server.

    Serves until Ctrl-C or SIGTERM and prints, on stdout, the ``export`` line that points the
    ClearML SDK here. A test double: it answers the calls tracker_saver and ignite make, no more.
    """
    import argparse
    import shutil
    import signal
    import sys
    import tempfile
    from pathlib import Path

    from tests.conftest_clearml import clearml_config_text

    parser = argparse.ArgumentParser(description="the ClearML API stand-in (a test double, not a server)")
    parser.add_argument("--port", type=int, default=8008, help="port on 127.0.0.1 (default: 8008)")
    port = parser.parse_args(argv).port
    root = Path(tempfile.mkdtemp(prefix="clearml-standin-"))
    (root / "cache").mkdir()
    (root / "clearml.conf").write_text(clearml_config_text(root / "cache"))
    # Before the export line: whoever read it may stop us at once, and must find us able to clean up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server = ClearMLStandIn(port=port).start()
        host = server.api_host
        try:
            print(
                f"export CLEARML_API_HOST={host} CLEARML_WEB_HOST={host} CLEARML_FILES_HOST={host} "
                f"CLEARML_API_ACCESS_KEY={ACCESS_KEY} CLEARML_API_SECRET_KEY={SECRET_KEY} "
                f"CLEARML_CONFIG_FILE={root / 'clearml.conf'} CLEARML_CACHE_DIR={root / 'cache'}",
                flush=True,
            )
            print(f"ClearML stand-in (a test double) on {host}; Ctrl-C stops it", file=sys.stderr)
            signal.pause()
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)  # its clearml.conf and cache: nothing is left in /tmp


if __name__ == "__main__":
    main()

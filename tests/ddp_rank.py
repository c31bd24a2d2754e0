"""One rank of a gloo process group, started as ``torchrun`` starts it: its rank in the environment.

``python -m tests.ddp_rank MODULE:FUNCTION ARGS_JSON`` joins the group that ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` describe
(``idist.initialize("gloo")``, as a script that torchrun launched calls it), runs
``FUNCTION(local_rank, *ARGS)``, frees what it made, and leaves the group. With
``TORCHELASTIC_USE_AGENT_STORE=True`` every rank is a client of a store someone else holds,
as under torchrun's agent: ``tests/test_ddp.py``'s test process holds it, on a port it never gave up.
A collective that one rank never joins fails after ``GROUP_TIMEOUT`` instead of hanging.
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
from datetime import timedelta

import ignite.distributed as idist

#: A collective waiting longer than this fails instead of hanging (gloo's default is 30 minutes).
GROUP_TIMEOUT = timedelta(seconds=30)


def main(target: str, args: str) -> None:
    """Join the group, run ``target`` (``module:function``) with this rank's local rank and ``args``, leave."""
    module, _, name = target.partition(":")
    worker = getattr(importlib.import_module(module), name)
    idist.initialize("gloo", timeout=GROUP_TIMEOUT)
    try:
        worker(idist.get_local_rank(), *json.loads(args))
        gc.collect()  # its DDP models freed before the process group is destroyed (see examples/ddp.py)
    finally:
        idist.finalize()


if __name__ == "__main__":
    main(*sys.argv[1:])

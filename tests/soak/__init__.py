"""The fault-injection soak: a real Ignite training killed at random moments, checked after each kill.

``python -m tests.soak --backend local|s3|clearml --kills N --seed S`` runs it (see
``docs/fault-injection.md``). The modules:

* ``plan``: the crash points and the kill plan a seed draws (pure);
* ``trainer``: the training process that is killed, with the crash points installed;
* ``twin``: what the registry must hold, from Ignite's own ``Checkpoint`` and DESIGN's slot rules;
* ``backends``: local folder + SQLite, Ceph RGW + SQLite, the ClearML stand-in: read directly;
* ``check``: the invariants, checked on what storage and registry hold;
* ``driver``: spawn, kill, check, restart; the summary;
* ``race``, ``racer``: the race soak (``python -m tests.soak --race``): a training and N racer
  processes pinning, aliasing, renaming, pruning, taking over, repairing and reading the same
  records at once, then every invariant checked (DESIGN, "At the same time, and across time").
"""

"""Query the registry for the best checkpoint, load it into a fresh model, and rename it.

Run examples/quickstart.py first (in the same folder), then:

    python examples/query_and_load.py

The registry is ./registry.db (or $TRACKER_SAVER_REGISTRY). The same query from a shell:
tracker-saver --registry registry.db models list --where "score>0.5" --sort -score
"""

import os
import sys

from torch import nn

from tracker_saver import find_models, load_checkpoint, rename_model

registry = os.environ.get("TRACKER_SAVER_REGISTRY", "registry.db")
if not os.path.exists(registry):
    sys.exit(f"no registry at {registry}: run examples/quickstart.py first")

# --8<-- [start:query]
top = find_models(project="quickstart", where={"score": (">", 0.5)}, order_by="-score", live=True, registry=registry)
if not top:
    sys.exit("no live checkpoint scores above 0.5 yet: train longer (run examples/quickstart.py again)")
best = top[0]
print(f"best: record {best.id} {best.name}, val_acc={best.score:.4f}, step {best.global_step}, in {best.uri}")

# The same architecture as in quickstart.py, freshly initialised:
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
load_checkpoint(best, {"model": model}, registry=registry)  # size and sha256 verified before torch.load
rename_model(best.id, "quickstart: the one we ship", registry=registry)  # later saves never undo it
# --8<-- [end:query]
print(f"loaded record {best.id} into a fresh model and renamed it 'quickstart: the one we ship'")

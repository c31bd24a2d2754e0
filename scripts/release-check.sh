#!/usr/bin/env bash
# The release checklist's build step (docs/releases.md): build the sdist and the wheel, install the
# wheel into a clean venv once per extra, and smoke-test each there, outside the clone.
#
#   bash scripts/release-check.sh            every extra: none, s3, clearml, mlflow, ui
#   bash scripts/release-check.sh s3 ui      only these ("core" is the one without an extra)
#
# Needs .venv (scripts/dev.sh setup; its test extra has `build`). The wheel is built from the sdist,
# so a file the sdist misses fails here. Each venv gets the wheel with uv and constraints.txt, so
# torch stays the local CPU wheel. Not in the test command: five venvs with torch cost minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
EXTRAS=("$@")
[ ${#EXTRAS[@]} -gt 0 ] || EXTRAS=(core s3 clearml mlflow ui)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/release-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
log() { printf '%s\n' "release-check: $*" >&2; }

# pip's find-links (where this machine keeps local wheels, torch's CPU build among them), as dev.sh does.
links=()
while read -r link; do links+=(--find-links "$link"); done < <(
    "$VENV/bin/python" -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u)

# --no-isolation: the venv's setuptools builds it (an isolated build would fetch setuptools again).
"$VENV/bin/python" -m build --no-isolation --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || {
    tail -40 "$WORK/build.log" >&2
    exit 1
}
wheel=$(ls "$WORK"/dist/tracker_saver-*.whl)
sdist=$(ls "$WORK"/dist/tracker_saver-*.tar.gz)
version=$("$VENV/bin/python" -c 'import tracker_saver; print(tracker_saver.__version__)')
case "$wheel" in *"-$version-"*) ;; *) log "the wheel $wheel is not version $version"; exit 1 ;; esac
log "built $(basename "$sdist") and $(basename "$wheel")"

# What each extra must import once installed.
declare -A needs=([core]="" [s3]="boto3" [clearml]="tracker_saver.integrations.clearml.registry"
                  [mlflow]="tracker_saver.integrations.mlflow.registry" [ui]="tracker_saver.ui.app")
for extra in "${EXTRAS[@]}"; do
    [ -n "${needs[$extra]+set}" ] || { log "unknown extra $extra: use core, s3, clearml, mlflow or ui"; exit 2; }
    env="$WORK/venv-$extra"
    spec=$wheel
    [ "$extra" = core ] || spec="$wheel[$extra]"
    "$VENV/bin/uv" venv -q --python "$VENV/bin/python" "$env"
    "$VENV/bin/uv" pip install -q --python "$env/bin/python" -c constraints.txt "${links[@]}" "$spec"
    mkdir -p "$WORK/run-$extra"
    # A 2-epoch save with SQLite into a temporary folder, from outside the clone, then the CLI's listing.
    (cd "$WORK/run-$extra" && OMP_NUM_THREADS=1 "$env/bin/python" - "$version" "${needs[$extra]}" <<'EOF'
import importlib, sys
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint
import tracker_saver
from tracker_saver import TrackerSaver, find_models

version, module = sys.argv[1], sys.argv[2]
assert tracker_saver.__version__ == version and "site-packages" in tracker_saver.__file__, tracker_saver.__file__
if module:
    importlib.import_module(module)
net = torch.nn.Linear(4, 2)
trainer = Engine(lambda engine, batch: None)
saver = TrackerSaver("out", project="smoke", run="r", registry="reg/registry.db")
trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
trainer.run([0], max_epochs=2)
saver.close()
assert [r.state.value for r in find_models(project="smoke", registry="reg/registry.db")] == ["evicted", "live"]
EOF
    )
    "$env/bin/tracker-saver" --registry "$WORK/run-$extra/reg/registry.db" models list >"$WORK/list-$extra.txt"
    grep -q "model_2.pt" "$WORK/list-$extra.txt" || { cat "$WORK/list-$extra.txt" >&2; exit 1; }
    log "$extra: installed, saved 2 epochs, listed them: ok"
done
log "tracker-saver $version: sdist and wheel build; the wheel works with extras ${EXTRAS[*]}"

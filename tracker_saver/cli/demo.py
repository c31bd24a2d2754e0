"""The demo: a small CNN on synthetic images, two checkpoint streams, then what was saved."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import torch
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint, global_step_from_engine
from ignite.metrics import Accuracy, Loss
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tracker_saver.cli.console import make_console, print_records
from tracker_saver.core.wording import plural
from tracker_saver.models import find_models
from tracker_saver.save.saver import TrackerSaver

__all__ = ["cli_command", "make_data", "run_demo", "small_cnn"]


def make_data(n: int, *, seed: int) -> TensorDataset:
    """``n`` noisy 1×12×12 images in 4 classes: the class is which quadrant is bright.

    Examples:
        >>> x, y = make_data(8, seed=0)[0]
        >>> tuple(x.shape), int(y) in range(4)
        ((1, 12, 12), True)
    """
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    images = 2.0 * torch.randn(n, 1, 12, 12, generator=g)
    for i, label in enumerate(labels.tolist()):
        r, c = divmod(label, 2)
        images[i, 0, r * 6 : r * 6 + 6, c * 6 : c * 6 + 6] += 0.35
    return TensorDataset(images, labels)


def small_cnn() -> nn.Module:
    """A two-layer CNN for 1×12×12 inputs and 4 classes."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 3 * 3, 4),
    )


def cli_command() -> str:
    """How to type ``tracker-saver`` in this shell: the script installed beside this Python.

    ``bash scripts/dev.sh demo`` runs a venv that it does not activate, so the bare name is
    ``command not found``: the script's own path works, relative to the current folder when it is
    under it (``.venv/bin/tracker-saver``). The bare name only when PATH finds that very script;
    ``python -m tracker_saver`` when this Python has no such script (run from a source tree).

    Examples:
        >>> cli_command().endswith(("tracker-saver", "-m tracker_saver"))
        True
    """
    script = Path(sys.executable).absolute().parent / "tracker-saver"
    if not script.is_file():
        return f"{shlex.quote(sys.executable)} -m tracker_saver"
    found = shutil.which("tracker-saver")
    if found is not None and Path(found).resolve() == script.resolve():
        return "tracker-saver"
    if script.is_relative_to(Path.cwd()):
        script = script.relative_to(Path.cwd())
    return shlex.quote(str(script))


def run_demo(
    output_dir: str | os.PathLike[str] = "demo-output", *, epochs: int = 6, registry: str | None = None
) -> None:
    """Train for ``epochs`` on the CPU with a best (n_saved=2) and a last (n_saved=1) stream.

    Checkpoints go to ``<output_dir>/checkpoints``; the registry is ``<output_dir>/registry.db``
    unless ``registry`` names another. Prints the folder listing and the registry table.
    """
    torch.manual_seed(0)
    out = Path(output_dir)
    console = make_console()
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    train = DataLoader(make_data(1024, seed=1), batch_size=64, shuffle=True)
    val = DataLoader(make_data(256, seed=2), batch_size=256)
    trainer = create_supervised_trainer(model, opt, nn.CrossEntropyLoss())
    evaluator = create_supervised_evaluator(
        model, metrics={"val_acc": Accuracy(), "val_loss": Loss(nn.CrossEntropyLoss())}
    )

    saver = TrackerSaver(out / "checkpoints", project="demo", run="small-cnn", registry=registry or out / "registry.db")
    best = Checkpoint(
        {"model": model},
        saver,
        n_saved=2,
        filename_prefix="best",
        score_function=Checkpoint.get_default_score_fn("val_acc"),
        score_name="val_acc",
        global_step_transform=global_step_from_engine(trainer),
    )
    last = Checkpoint({"model": model, "optimizer": opt, "trainer": trainer}, saver, n_saved=1)
    evaluator.add_event_handler(Events.COMPLETED, best)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, last)

    @trainer.on(Events.EPOCH_COMPLETED)
    def _validate(engine: object) -> None:
        evaluator.run(val)
        console.print(f"epoch {trainer.state.epoch}: val_acc={evaluator.state.metrics['val_acc']:.4f}")

    started = time.perf_counter()
    trainer.run(train, max_epochs=epochs)
    console.print(f"\ntrained {plural(epochs, 'epoch')} in {time.perf_counter() - started:.1f} s\n")

    objects = saver.storage.list()
    console.print(
        f"[bold]{saver.storage.uri}[/bold] holds {plural(len(objects), 'object')} (slot keys, never semantic names):"
    )
    for obj in objects:
        console.print(f"  {obj.key}  ({plural(obj.size, 'byte')})")
    console.print()
    print_records(saver.records(), console, title=f"registry {saver.registry.uri}: every checkpoint ever saved")
    top = find_models(
        project="demo",
        run="small-cnn",
        order_by="-score",
        live=True,
        where={"score": (">", 0.0)},
        registry=saver.registry,
    )
    if top:
        console.print(f"\nbest live checkpoint: {top[0].name} (score {top[0].score:.4f}) in {top[0].uri}")
    where = shlex.quote(os.fspath(registry or out / "registry.db"))
    console.print(f"\ntry: {cli_command()} --registry {where} models list --where 'score>0.5' --sort -score")
    saver.close()

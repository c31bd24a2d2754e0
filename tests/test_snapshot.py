"""Snapshots: a consistent copy that training may change at once, with buffers reused between saves."""

from __future__ import annotations

import collections
import io

import torch
from ignite.engine import Engine
from ignite.handlers import Checkpoint

from tests.helpers import model
from tracker_saver.save.snapshot import BufferPool, take_snapshot


def test_the_copy_keeps_its_values_while_training_changes_the_weights() -> None:
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(1, 4)).sum().backward()
    opt.step()
    checkpoint = {"model": net.state_dict(), "optimizer": opt.state_dict()}
    expected = io.BytesIO()
    torch.save(checkpoint, expected)
    snap = take_snapshot(checkpoint, BufferPool())
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    opt.step()
    got = io.BytesIO()
    torch.save(snap.checkpoint, got)
    restored = torch.load(io.BytesIO(got.getvalue()), weights_only=True)
    original = torch.load(io.BytesIO(expected.getvalue()), weights_only=True)
    assert restored["model"].keys() == original["model"].keys()
    for key, value in original["model"].items():
        assert torch.equal(restored["model"][key], value), key
    assert restored["optimizer"]["param_groups"] == original["optimizer"]["param_groups"]


def test_types_are_kept_and_a_shared_tensor_stays_shared() -> None:
    Item = collections.namedtuple("Item", "priority filename")
    shared = torch.arange(4.0)
    state = collections.OrderedDict(a=shared, b=shared, saved=[Item(1, "m_1.pt")], meta=(1, "x"))
    state._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    snap = take_snapshot({"model": state}, BufferPool())
    copy = snap.checkpoint["model"]
    assert type(copy) is collections.OrderedDict and copy._metadata == {"": {"version": 1}}
    assert copy["a"] is copy["b"] and copy["a"] is not shared
    assert copy["saved"] == [Item(1, "m_1.pt")] and type(copy["saved"][0]) is Item
    assert copy["meta"] == (1, "x")


def test_buffers_are_reused_after_release_and_not_before() -> None:
    pool = BufferPool()
    weights = {"w": torch.ones(256, 256)}
    first = take_snapshot(weights, pool)
    second = take_snapshot(weights, pool)  # the first is still being written: a new buffer
    assert second.checkpoint["w"].data_ptr() != first.checkpoint["w"].data_ptr()
    used = first.checkpoint["w"].data_ptr()
    first.release()
    second.release()
    assert pool.nbytes == 2 * 256 * 256 * 4
    third = take_snapshot(weights, pool)
    assert third.checkpoint["w"].data_ptr() in (used, second.checkpoint["w"].data_ptr())


def test_a_real_ignite_checkpoint_snapshot_round_trips_through_load_objects() -> None:
    net = model()
    trainer = Engine(lambda e, b: None)
    trainer.run([0], max_epochs=3)
    handler = Checkpoint({"model": net, "trainer": trainer}, lambda *a: None, include_self=True)
    snap = take_snapshot(handler._setup_checkpoint() | {"checkpointer": handler.state_dict()}, BufferPool())
    buf = io.BytesIO()
    torch.save(snap.checkpoint, buf)
    fresh, again = model(), Engine(lambda e, b: None)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    Checkpoint.load_objects({"model": fresh, "trainer": again}, torch.load(io.BytesIO(buf.getvalue())))
    assert again.state.epoch == 3
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), net.state_dict().values(), strict=True))

"""Ignite filenames → typed metadata, and slot keys that stay inside output_uri (pure)."""

from __future__ import annotations

import math

import pytest

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.naming import (
    check_key,
    check_name,
    key_ext,
    key_segment,
    parse_filename,
    safe_filename,
    slot_key,
    split_basename,
)


@pytest.mark.parametrize(
    ("filename", "basename", "score_name", "priority", "step", "score"),
    [
        ("best_model_17_val_acc=0.9312.pt", "best_model", "val_acc", 0.93121, 17, 0.93121),
        ("best_model_val_acc=0.9312.pt", "best_model", "val_acc", 0.93121, None, 0.93121),
        ("checkpoint_400.pt", "checkpoint", None, 400, 400, None),
        ("best_model_0.9312.pt", "best_model", None, 0.93121, None, 0.93121),
        ("best_model_3_0.9312.pt", "best_model", None, 0.93121, 3, 0.93121),
        ("model_3_val_loss=-0.5000.pt", "model", "val_loss", -0.5, 3, -0.5),
        ("best_model_2_val_acc=nan.pt", "best_model", "val_acc", math.nan, 2, None),
        ("best_checkpoint_5_acc=1.0000.pt", "best_checkpoint", "acc", 1, 5, 1.0),
    ],
)
def test_default_pattern_gives_typed_step_and_score(filename, basename, score_name, priority, step, score) -> None:
    meta = parse_filename(filename, basename, score_name, priority)
    assert meta["global_step"] == step
    assert meta["score"] == (pytest.approx(score) if score is not None else None)
    assert meta["score"] is None or type(meta["score"]) is float
    assert meta["global_step"] is None or type(meta["global_step"]) is int
    assert meta["basename"] == basename and meta["ext"] == ".pt" and "filename_pattern" not in meta


def test_a_custom_pattern_keeps_score_from_priority_and_says_so() -> None:
    meta = parse_filename("run-7-model.pt", "model", "acc", 0.8)
    assert (meta["global_step"], meta["score"], meta["filename_pattern"]) == (None, 0.8, "custom")


def test_basename_splits_into_prefix_and_name() -> None:
    assert split_basename("best_model") == ("best", "model")
    assert split_basename("checkpoint") == ("", "checkpoint")


def test_slot_key_is_deterministic_and_free_of_the_semantic_name() -> None:
    assert slot_key("mnist", "resnet-lr0.1", "best_model", 1, ".pt") == "mnist/resnet-lr0.1/best_model.slot1.pt"


@pytest.mark.parametrize(
    "name",
    ["..", "a/b", "../x", ".hidden", "a\\b", "trailing ", "a" * 201, "resnet (lr=0.1) [v2]: run #3, final",
     "最佳模型", "%2e%2e", "\u2024\u2024", "/abs", "C:\\x"],
)  # fmt: skip
def test_any_run_or_stream_name_gets_a_safe_key_segment_that_stays_inside_output_uri(name) -> None:
    segment = key_segment(name)
    assert check_key(f"p/{segment}/s.slot0.pt") == f"p/{segment}/s.slot0.pt"
    assert "/" not in segment and ".." not in segment.split("-")
    key = slot_key("p", name, name, 0, ".pt")
    assert key.startswith("p/") and key.count("/") == 2 and key.endswith(".slot0.pt")


def test_names_that_slug_alike_get_different_segments() -> None:
    assert key_segment("a b!") != key_segment("a b?")
    assert key_segment("resnet-lr0.1") == "resnet-lr0.1"  # a safe name is its own key segment


@pytest.mark.parametrize("bad", ["", "  ", None, 3, "a" * 1001])
def test_unusable_names_are_refused_with_the_rule(bad) -> None:
    with pytest.raises(ConfigError, match="not a usable name"):
        check_name("run", bad)


@pytest.mark.parametrize("bad", ["x\x00", "x\x1b[1A", "p\ud800", "gpj.\u202eexe"])
def test_a_name_that_breaks_the_text_rule_is_refused_naming_the_character(bad) -> None:
    with pytest.raises(ConfigError, match=r"^run '.*' holds U\+[0-9A-F]{4}.* at character \d+, "):
        check_name("run", bad)


def test_the_key_extension_never_follows_a_score_in_a_custom_pattern() -> None:
    assert {key_ext(f"model_{s}") for s in ("0.1000", "0.2000", "1", "nan", "inf")} == {".pt"}
    assert key_ext("model_0.5.ckpt") == ".ckpt"


def test_slot_must_be_a_non_negative_int() -> None:
    with pytest.raises(ConfigError, match="non-negative int"):
        slot_key("p", "r", "s", -1, ".pt")
    with pytest.raises(ConfigError, match="extension"):
        slot_key("p", "r", "s", 0, "./../x")


@pytest.mark.parametrize(
    ("name", "ext", "expected"),
    [
        ("runner-up", ".pt", "runner-up.pt"),
        ("quickstart_ the one we ship", ".pt", "quickstart_the_one_we_ship.pt"),
        ("best_model_6_val_acc=0.9500.pt", ".pt", "best_model_6_val_acc=0.9500.pt"),
        ("final.PT", ".pt", "final.pt"),
        ("../../etc/passwd", ".ckpt", "etc_passwd.ckpt"),
        ("-rf .hidden", ".pt", "rf_.hidden.pt"),
        ("résnet (lr=0.1) [v2]: #3", ".pth", "resnet_lr=0.1_v2_3.pth"),
        ("模型", ".pt", "checkpoint.pt"),
        ("a\nb\x00c", "", "a_b_c"),
    ],
)
def test_a_download_file_name_is_a_safe_slug_with_the_checkpoints_extension(name: str, ext: str, expected: str) -> None:
    got = safe_filename(name, ext)
    assert got == expected
    assert set(got) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-=")
    assert not got.startswith((".", "-")) and len(got) <= 200 + len(ext)

"""Where-expressions and ordering, parsed once (pure)."""

from __future__ import annotations

import pytest

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.query import Condition, Order, check_key, matches, parse_order, parse_where


def test_cli_expressions_parse_to_typed_conditions() -> None:
    assert parse_where(["score>0.9", "prefix=best", "global_step in 10,20", "name != 'x y'"]) == (
        Condition("score", ">", 0.9),
        Condition("prefix", "==", "best"),
        Condition("global_step", "in", [10, 20]),
        Condition("name", "!=", "x y"),
    )


def test_dict_where_supports_equality_range_and_membership() -> None:
    conds = parse_where({"prefix": "best", "score": (">=", 0.5), "slot": ("in", (0, 1))})
    assert matches({"prefix": "best", "score": 0.5, "slot": 1}, conds)
    assert not matches({"prefix": "best", "score": 0.4, "slot": 1}, conds)
    assert not matches({"prefix": "best", "score": None, "slot": 1}, conds)


def test_absent_values_never_match_and_types_do_not_mix() -> None:
    assert not Condition("score", "!=", 0.5).test(None)
    assert not Condition("score", ">", 0.5).test("0.9")
    assert not Condition("flag", "==", 1).test(True)
    assert Condition("step", "==", 3).test(3.0)


@pytest.mark.parametrize("bad", ["score", "score>", ">0.9", "1score>2", "score ~ 2"])
def test_malformed_expressions_are_refused_with_an_example(bad) -> None:
    with pytest.raises(ConfigError, match="KEY OP VALUE|not a metadata key"):
        parse_where(bad)


def test_bad_operator_and_in_without_a_list_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown"):
        parse_where({"score": ("~", 1)})
    with pytest.raises(ConfigError, match="needs a list"):
        Condition("slot", "in", "01")


def test_order_by_minus_means_descending() -> None:
    assert parse_order(["-score", "global_step"]) == (Order("score", True), Order("global_step", False))
    with pytest.raises(ConfigError, match="is not a key"):
        parse_order("-")


def test_record_fields_compare_as_text_and_ranges_need_numbers() -> None:
    assert parse_where(["run=1", "state=live", "name!=x", "id in 3,4"]) == (
        Condition("run", "==", "1"),
        Condition("state", "==", "live"),
        Condition("name", "!=", "x"),
        Condition("id", "in", [3, 4]),
    )
    with pytest.raises(ConfigError, match=r"score>'abc': > compares numbers, and 'abc' is not a number"):
        parse_where("score>abc")
    with pytest.raises(ConfigError, match="'run' is text"):
        parse_where("run>=3")


def test_one_text_holds_several_conditions_joined_by_and() -> None:
    assert parse_where("score<0.3 and prefix=best") == (Condition("score", "<", 0.3), Condition("prefix", "==", "best"))
    assert parse_where(["score>0.1 AND global_step in 1,2", "name != 'this and that'"]) == (
        Condition("score", ">", 0.1),
        Condition("global_step", "in", [1, 2]),
        Condition("name", "!=", "this and that"),
    )
    assert parse_where("prefix=android") == (Condition("prefix", "==", "android"),)  # a word, not the joiner
    assert parse_where("") == parse_where("  ") == parse_where([" "]) == ()


@pytest.mark.parametrize("bad", ["score>0.1 and", "and score>0.1", "score>0.1 and and prefix=best"])
def test_an_and_with_nothing_beside_it_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"has an empty condition next to 'and': join conditions as"):
        parse_where(bad)


def test_an_unknown_key_is_named_with_the_closest_and_the_known_keys() -> None:
    check_key("where", "score", ())  # a key every saved record carries
    check_key("sort", "state", ())  # a record field
    check_key("where", "lr (warm-up)", {"lr (warm-up)"})  # a callback's key that a record holds
    with pytest.raises(
        ConfigError,
        match=r"^unknown where key 'scor' \(did you mean 'score'\?\): it is not a record field, and no record in the "
        r"registry has it as metadata; known keys: basename, created_at, .*, lr, .*, score, ",
    ):
        check_key("where", "scor", {"lr"})
    with pytest.raises(ConfigError, match=r"^unknown sort key 'nosuchkey': .*known keys: .*\bid\b"):
        check_key("sort", "nosuchkey", ())

"""The one text rule and the one terminal escape (``tracker_saver.core.text``): pure, no fixtures."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.text import METADATA_VALUE_ALLOWS, check_text, escape, first_refused

#: What another writer can plant in a name: each must be refused on the way in and escaped on the way out.
ATTACKS = {
    "ESC cursor up and CR": "best\x1b[1A\rfake",
    "OSC 8 link": "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "OSC retitle": "\x1b]0;owned\x07",
    "C1 CSI": "a\x9b31mred",
    "NUL": "a\x00b",
    "DEL": "a\x7fb",
    "LF": "line\nfake line",
    "lone surrogate (bytes not UTF-8)": "bad\udcffbyte",
    "right-to-left override": "model\u202egpj.exe",
    "first strong isolate": "\u2068abc\u2069",
    "line separator": "a\u2028b",
    "zero width space": "be\u200bst",
    "byte order mark": "\ufeffbest",
}

#: Text people type, all of it allowed: accents, other scripts, emoji with joiners, RTL text.
ALLOWED = [
    "resnet (lr=0.1) [v2]: #3",
    "résnet 模型",
    "scientist 🧑\u200d🔬 and flag 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "نموذج",  # Arabic, written right to left by its own characters, with no control
    "zero width non-joiner: می\u200cخواهم",
    "a\u200eb",  # LEFT-TO-RIGHT MARK: a mark, not an override
]


@pytest.mark.parametrize("text", ALLOWED)
def test_text_people_type_passes_the_rule_unchanged_and_escapes_to_itself(text) -> None:
    assert check_text("name", text) == text
    assert escape(text) == text


@pytest.mark.parametrize("text", ATTACKS.values(), ids=list(ATTACKS))
def test_every_attack_is_refused_naming_the_field_the_character_and_the_fix(text) -> None:
    at = first_refused(text)
    assert at is not None
    char = text[at]
    with pytest.raises(
        ConfigError, match=rf"^tag '.*' holds U\+{ord(char):04X}.* at character {at + 1}, .*: "
    ) as caught:
        check_text("tag", text)
    message = str(caught.value)
    assert first_refused(message) is None  # the message itself is safe to print
    assert "docs/security.md" in message
    fix = "pass it as UTF-8 text" if unicodedata.category(char) == "Cs" else "remove it"
    assert fix in message


@pytest.mark.parametrize("text", ATTACKS.values(), ids=list(ATTACKS))
def test_the_escape_makes_every_attack_visible_and_inert(text) -> None:
    shown = escape(text)
    assert first_refused(shown) is None
    assert "\x1b" not in shown and "\r" not in shown and "\n" not in shown
    shown.encode("utf-8")  # never a lone surrogate: it prints on any UTF-8 terminal


def test_the_escape_spells_each_character_as_python_would() -> None:
    assert escape("a\tb\nc\rd") == "a\\tb\\nc\\rd"
    assert escape("\x1b[2J\x9b") == "\\x1b[2J\\x9b"
    assert escape("\u202e\udcff\u200b") == "\\u202e\\udcff\\u200b"
    assert escape(None) == "None" and escape(3.5) == "3.5"


def test_a_metadata_value_may_hold_tab_and_newline_but_no_other_control() -> None:
    note = "line one\n\tline two"
    assert check_text("metadata['note']", note, allow=METADATA_VALUE_ALLOWS) == note
    with pytest.raises(ConfigError, match=r"^metadata\['note'\] 'x\\r' holds U\+000D \(CR\) at character 2"):
        check_text("metadata['note']", "x\r", allow=METADATA_VALUE_ALLOWS)


def test_a_long_text_is_quoted_short_in_the_message() -> None:
    with pytest.raises(ConfigError, match=r"^name 'x{77}\.\.\.' holds U\+001B \(ESC\) at character 201"):
        check_text("name", "x" * 200 + "\x1b")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, categories=None), max_size=40))
def test_any_text_is_either_allowed_unchanged_or_refused_and_its_escape_always_passes(text) -> None:
    try:
        assert check_text("name", text) == text
    except ConfigError:
        assert first_refused(text) is not None
    else:
        assert escape(text) == text
    assert first_refused(escape(text)) is None

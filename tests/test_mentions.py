"""The project's quick test of which files name a launched script (or the signal) tells exactly
what a search for each word would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from xlamigrate.project.mentions import _MAX_VISITS, Words

# A small alphabet, so words and their endings keep turning up in the data.
_BYTES = st.binary(max_size=200).map(lambda data: bytes(b % 5 + ord(".") for b in data))
_WORDS = st.lists(st.binary(min_size=1, max_size=8).map(lambda w: bytes(b % 5 + 46 for b in w)))


@settings(max_examples=400, deadline=None)
@given(words=_WORDS, data=_BYTES)
def test_words_any_in_agrees_with_a_search_per_word(words: list[bytes], data: bytes) -> None:
    assert Words(words).any_in(data) == any(word in data for word in words)


def test_script_names_are_found_where_they_stand() -> None:
    words = Words([b"train.py", b"run_clm.py", b"BF16_RECIPE"])
    assert words.any_in(b"python3 train.py --bf16\n")
    assert words.any_in(b"torchrun run_clm.py")
    assert words.any_in(b'os.environ["BF16_RECIPE"]')
    assert not words.any_in(b"import setup.py; other.py; train.p y")
    assert not words.any_in(b"")


def test_an_ending_met_more_often_than_it_is_worth_walking_falls_back_to_searches() -> None:
    words = Words([b"x_train.py"])
    crowded = b"a.py " * (_MAX_VISITS * 2)
    assert not words.any_in(crowded)
    assert words.any_in(crowded + b"x_train.py")
    assert words.any_in(b"x_train.py" + crowded)
    assert words.any_in(crowded[:100] + b"x_train.py" + crowded)


def test_the_fallback_sees_a_word_that_began_before_the_ending_it_stopped_at() -> None:
    crowded = b"a.py " * _MAX_VISITS
    assert Words([b"z.py.py"]).any_in(crowded + b"z.py.py")

"""``OutputMode``: one name in every layer; the spellings users write all map to it."""

from __future__ import annotations

import pytest

from asyncio_lookup.runtime import OutputMode


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("ordered", OutputMode.ORDERED),
        ("ORDERED", OutputMode.ORDERED),
        (" Ordered ", OutputMode.ORDERED),
        ("unordered", OutputMode.UNORDERED),
        ("UNORDERED", OutputMode.UNORDERED),
        ("allow_unordered", OutputMode.UNORDERED),  # the LOOKUP hint's 'output-mode'
        ("ALLOW_UNORDERED", OutputMode.UNORDERED),  # table.exec.async-lookup.output-mode
        (OutputMode.UNORDERED, OutputMode.UNORDERED),
        ("key_ordered", OutputMode.KEY_ORDERED),  # FLIP-519
        ("KEY_ORDERED", OutputMode.KEY_ORDERED),
    ],
)
def test_every_spelling_is_one_member(text: object, mode: OutputMode) -> None:
    assert OutputMode(text) is mode


@pytest.mark.parametrize("text", ["", "sorted", "allow-unordered", "key-ordered", 1, None])
def test_anything_else_is_not_an_output_mode(text: object) -> None:
    with pytest.raises(ValueError):
        OutputMode(text)

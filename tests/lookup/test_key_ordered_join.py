"""Key-ordered lookup joins (FLIP-519): the LOOKUP hint's ``'output-mode'='key_ordered'``, the
job default ``table.exec.async-lookup.key-ordered-enabled``, and the runner keyed by the lookup
key."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Collection

import pytest

from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.lookup.chain import LookupChain
from asyncio_lookup.lookup.functions import AsyncLookupFunction, Key, Row
from asyncio_lookup.lookup.hint_resolve import (
    CONF_KEY_ORDERED,
    CONF_OUTPUT_MODE,
    AsyncDefaults,
    resolve_lookup,
)
from asyncio_lookup.lookup.hints import LookupHint
from asyncio_lookup.lookup.join import JoinSpec, JoinType, KeyBinding, LookupJoinRunner
from asyncio_lookup.lookup.options import LookupOptions
from asyncio_lookup.lookup.providers import AsyncLookupFunctionProvider
from asyncio_lookup.runtime import OutputMode

from .test_join import collect, probe

SPEC = JoinSpec(JoinType.LEFT, (KeyBinding("id", left_column="cid"),))


@pytest.mark.parametrize("text", ["key_ordered", "KEY_ORDERED", " Key_Ordered "])
def test_the_hint_takes_key_ordered(text: str) -> None:
    resolved = resolve_lookup(f"LOOKUP('table'='T', 'output-mode'='{text}')", "T")
    assert resolved.output_mode == "key_ordered"
    assert OutputMode(resolved.output_mode) is OutputMode.KEY_ORDERED
    hint = LookupHint.parse(f"LOOKUP('table'='T', 'output-mode'='{text}')")
    assert LookupHint.parse(hint.to_text()) == hint


def test_a_misspelled_mode_lists_the_three() -> None:
    with pytest.raises(HintError, match="key_ordered") as error:
        resolve_lookup("LOOKUP('table'='T', 'output-mode'='key-ordered')", "T")
    message = str(error.value)
    assert "'output-mode'" in message and "allow_unordered" in message and "ordered" in message


@pytest.mark.parametrize(
    ("conf", "hint", "mode"),
    [
        # Flink's rule: key order enabled turns an unordered join key-ordered
        ({CONF_KEY_ORDERED: "true"}, "'output-mode'='allow_unordered'", "key_ordered"),
        ({CONF_KEY_ORDERED: "true", CONF_OUTPUT_MODE: "ALLOW_UNORDERED"}, None, "key_ordered"),
        ({CONF_KEY_ORDERED: "TRUE"}, None, "ordered"),  # ordered already keeps key order
        ({CONF_KEY_ORDERED: "true"}, "'output-mode'='ordered'", "ordered"),
        ({CONF_KEY_ORDERED: "false"}, "'output-mode'='allow_unordered'", "unordered"),
        ({}, "'output-mode'='key_ordered'", "key_ordered"),
        ({CONF_OUTPUT_MODE: "key_ordered"}, None, "key_ordered"),
    ],
)
def test_the_job_default_and_the_hint(conf: dict[str, str], hint: str | None, mode: str) -> None:
    text = None if hint is None else f"LOOKUP('table'='T', {hint})"
    resolved = resolve_lookup(text, "T", defaults=AsyncDefaults.from_conf(conf))
    assert resolved.output_mode == mode


def test_a_bad_key_ordered_conf_names_it() -> None:
    with pytest.raises(ConfigurationError, match=CONF_KEY_ORDERED.replace(".", r"\.")):
        AsyncDefaults.from_conf({CONF_KEY_ORDERED: "yes"})


class Tracking(AsyncLookupFunction):
    """Random latency; counts the lookups of each key running at once."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.running: dict[Key, int] = {}
        self.most = 0

    async def async_lookup(self, key: Key) -> Collection[Row]:
        self.running[key] = self.running.get(key, 0) + 1
        self.most = max(self.most, self.running[key])
        try:
            await asyncio.sleep(self.random.random() * 0.004)
        finally:
            self.running[key] -= 1
        return [{"id": key[0], "name": f"n{key[0]}"}]


@pytest.mark.parametrize("how", ["hint", "job default"])
async def test_the_runner_keeps_order_per_lookup_key(how: str) -> None:
    rng = random.Random(7)
    ids = [rng.randrange(6) if i % 9 else None for i in range(120)]
    fn = Tracking(seed=3)
    if how == "hint":
        resolved = resolve_lookup(
            "LOOKUP('table'='T', 'output-mode'='key_ordered', 'capacity'='16')", "T"
        )
    else:
        resolved = resolve_lookup(
            "LOOKUP('table'='T', 'output-mode'='allow_unordered', 'capacity'='16')",
            "T",
            defaults=AsyncDefaults(key_ordered=True),
        )
    chain = LookupChain.create(
        AsyncLookupFunctionProvider.of(fn),
        LookupOptions(),
        prefer_async=True,
        name="T",
        key_columns=("id",),
    )
    await chain.open()
    try:
        runner: LookupJoinRunner[str] = LookupJoinRunner(chain, SPEC, resolved)
        got = [
            (index, row)
            for b in await collect(
                runner.run_async([probe(ids[:70], SPEC), probe(ids[70:], SPEC, "b1")])
            )
            for index, row in zip(
                [i + (70 if b.payload == "b1" else 0) for i in b.indices], b.dim_rows, strict=True
            )
        ]
    finally:
        await chain.close()
    assert sorted(i for i, _ in got) == list(range(120))  # every row once
    for key in set(ids) - {None}:
        of_key = [i for i, row in got if row is not None and row["id"] == key]
        assert of_key == [i for i, k in enumerate(ids) if k == key]
    assert fn.most == 1
    assert runner.operator is not None and runner.operator.output_mode is OutputMode.KEY_ORDERED

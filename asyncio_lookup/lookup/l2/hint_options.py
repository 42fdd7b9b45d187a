"""``lookup.shared-cache.*`` options given in a LOOKUP hint: they override the table's for
that join (e.g. another TTL or namespace for one query)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from asyncio_lookup.errors import ConfigurationError, HintError
from asyncio_lookup.masking import mask_text
from asyncio_lookup.validation import refuse_unitless, unknown_option

SHARED_PREFIX = "lookup.shared-cache."


def parse_hint_options(pairs: Iterable[tuple[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The pairs validated (names known, values parse), as text; raises :class:`HintError`."""
    from asyncio_lookup.lookup.options import OPTIONS  # options imports this package

    names = {n: o for n, o in OPTIONS.items() if n.startswith(SHARED_PREFIX)}
    out: dict[str, str] = {}
    for raw_name, value in pairs:
        name = str(raw_name).strip().lower()
        option = names.get(name)
        shown = mask_text(value) if isinstance(value, str) else value  # a URL's password
        if option is None:
            raise unknown_option(
                raw_name, shown, tuple(names), kind="LOOKUP hint option", error=HintError
            )
        if name in out:
            raise HintError(name, shown, "each option at most once", reason="given twice")
        try:
            if option.is_duration:
                refuse_unitless(name, value, option.allowed)
            out[name] = option.text(option.parse(name, value))
        except ConfigurationError as error:
            raise HintError(error.option, error.value, error.allowed, error.reason) from None
    return tuple(out.items())

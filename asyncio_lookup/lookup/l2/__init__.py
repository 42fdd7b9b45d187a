"""The shared second cache level (L2): one store shared by every task of every executor and by
later jobs (docs/design.md "The shared cache"). Read order per lookup: the process's L1
(the PARTIAL cache) -> L2 -> the service; a value from the service goes to both."""

from asyncio_lookup.lookup.l2.codec import decode_entry, encode_entry, encode_key
from asyncio_lookup.lookup.l2.settings import SharedCacheSettings, default_namespace
from asyncio_lookup.lookup.l2.store import SharedStore
from asyncio_lookup.lookup.l2.stores import open_store, store_schemes
from asyncio_lookup.lookup.l2.tier import SharedTier

__all__ = [
    "SharedCacheSettings",
    "SharedStore",
    "SharedTier",
    "decode_entry",
    "default_namespace",
    "encode_entry",
    "encode_key",
    "open_store",
    "store_schemes",
]

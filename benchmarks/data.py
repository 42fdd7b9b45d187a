"""Generated data shared by the local servers, the Redis/PostgreSQL loaders and the scenarios.

A "customer" exists for every id in ``[0, n_customers)``; its row is a pure function of the id,
so the HTTP server, Redis and PostgreSQL all serve the same rows without shipping a table around.
"""

from __future__ import annotations

from typing import Any

import numpy as np

COUNTRIES = ("DE", "FR", "NL", "US", "JP", "BR", "IN", "ZA")
SEGMENTS = ("retail", "smb", "enterprise", "public")

CUSTOMER_SCHEMA = "id INT, name STRING, country STRING, segment STRING, credit_limit DOUBLE"
CUSTOMER_COLUMNS = ("id", "name", "country", "segment", "credit_limit")


def customer_row(customer_id: int) -> dict[str, Any]:
    """The row of customer ``customer_id`` (deterministic)."""
    return {
        "id": customer_id,
        "name": f"Customer {customer_id:07d}",
        "country": COUNTRIES[customer_id % len(COUNTRIES)],
        "segment": SEGMENTS[(customer_id // 7) % len(SEGMENTS)],
        "credit_limit": float((customer_id * 7919) % 100_000) / 10.0,
    }


def uniform_keys(n_rows: int, n_customers: int, seed: int = 7) -> np.ndarray:
    """``n_rows`` customer ids drawn uniformly from ``[0, n_customers)``."""
    return np.random.default_rng(seed).integers(0, n_customers, size=n_rows, dtype=np.int64)


def zipf_keys(n_rows: int, n_customers: int, exponent: float = 1.1, seed: int = 7) -> np.ndarray:
    """``n_rows`` customer ids from a bounded Zipf law (rank r has weight r^-exponent).

    Ranks are shuffled onto ids so the hot keys are spread over the id space.
    """
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_customers + 1, dtype=np.float64) ** -exponent
    weights /= weights.sum()
    ranks = rng.choice(n_customers, size=n_rows, p=weights)
    return rng.permutation(n_customers)[ranks].astype(np.int64)


def distinct_keys(n_rows: int, n_customers: int, seed: int = 7) -> np.ndarray:
    """``n_rows`` different customer ids (so each row is exactly one lookup, none coalesced)."""
    return np.random.default_rng(seed).choice(n_customers, size=n_rows, replace=False)

"""The scenario registry: name -> where its ``run(ctx)`` lives. Modules are imported lazily, so a
scenario whose dependencies have not landed is reported as skipped instead of breaking the rest."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

from benchmarks.harness import Context, ScenarioResult


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    target: str  # "module:function"
    uses_spark: bool = True
    in_all: bool = True  # False: opt-in only (too long for the 20-minute `all` budget)

    def load(self) -> Callable[[Context], ScenarioResult]:
        module, _, function = self.target.partition(":")
        loaded = importlib.import_module(module)
        run: Callable[[Context], ScenarioResult] = getattr(loaded, function)
        return run


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("operator-overhead", "Operator overhead", "benchmarks.external:run_operator_overhead",
             uses_spark=False),
    Scenario("http-clients", "HTTP clients inside HttpConnector", "benchmarks.http_clients:run",
             uses_spark=False),
    Scenario("spark-lookup-join", "Spark lookup join vs mapPartitions baselines",
             "benchmarks.spark_lookup_join:run"),
    Scenario("http-join", "HTTP lookup join: strongest baseline, two servers, the client-only "
             "ceiling", "benchmarks.http_join:run"),
    Scenario("capacity-sweep", "Capacity sweep vs Little's law and the CPU ceiling",
             "benchmarks.capacity_sweep:run"),
    Scenario("cache-modes", "Cache modes on a Zipf key stream", "benchmarks.cache_modes:run"),
    Scenario("connectors", "Connectors: per-key vs batched lookups",
             "benchmarks.external:run_connectors", uses_spark=False),
    Scenario("batching", "Batched lookups in lookup_join (Redis, PostgreSQL)",
             "benchmarks.batching:run"),
    Scenario("batched-async-map", "Batched async_map vs per-row async_map",
             "benchmarks.batched_async_map:run"),
    Scenario("retry-on-miss", "Retry-on-miss cost", "benchmarks.retry_cost:run"),
    Scenario("faults", "Long-tail latency and transient failures", "benchmarks.faults:run"),
    Scenario("memory", "Memory: peak worker RSS, 1M vs 10M rows", "benchmarks.memory:run"),
    Scenario("hash-lookup-join", "Hash lookup join: shuffle, salting, partitioned FULL cache",
             "benchmarks.external:run_hash_lookup_join"),
    Scenario("key-ordered", "Key-ordered output vs ORDERED and UNORDERED (FLIP-519)",
             "benchmarks.key_ordered:run", uses_spark=False),
    Scenario("shared-cache", "Shared cache (L2) vs L1 only vs SHUFFLE_HASH",
             "benchmarks.shared_cache:run"),
    Scenario("shuffle-size", "SHUFFLE_HASH's default exchange size",
             "benchmarks.shuffle_size:run"),
    Scenario("metrics-cost", "Metrics recording: join-path cost per row",
             "benchmarks.metrics_cost:run", uses_spark=False),
    Scenario("peers", "Peers: PyFlink AsyncDataStream, Spark classic, Spark Connect",
             "benchmarks.peers:run", in_all=False),
)

BY_NAME = {s.name: s for s in SCENARIOS}

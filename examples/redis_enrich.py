"""Enrich click events with user data kept in Redis (the machine's Redis, database 15).

Shows the RedisConnector's value formats: a JSON profile per user (``json``), a hash of
string settings (``hash``) and a JSON list of rows for a non-unique key (``json_list``),
joined with ``lookup_join`` under a PARTIAL cache; batched MGET/pipelines run underneath.

Needs ``pip install "asyncio-lookup[spark]"`` and the Redis server (``REDIS_URL``).

    python examples/redis_enrich.py
"""

from __future__ import annotations

import json
import os
import sys
import uuid

import redis
from pyspark.sql import SparkSession

from asyncio_lookup.connectors import RedisConnector
from asyncio_lookup.spark import LookupTable, lookup_join

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")


def spark_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("redis-enrich")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )


def load(client: redis.Redis, prefix: str) -> None:
    pipe = client.pipeline(transaction=False)
    for uid, name, plan in [(1, "ada", "pro"), (2, "grace", "free"), (3, "alan", "pro")]:
        pipe.set(f"{prefix}user:{uid}", json.dumps({"name": name, "plan": plan}))
        pipe.hset(f"{prefix}settings:{uid}", mapping={"theme": "dark", "lang": "en"})
    pipe.set(
        f"{prefix}devices:1",
        json.dumps([{"device": "laptop", "seen": 12}, {"device": "phone", "seen": 40}]),
    )
    pipe.set(f"{prefix}devices:3", json.dumps([{"device": "tablet", "seen": 3}]))
    pipe.execute()


def main() -> None:
    prefix = f"example:{uuid.uuid4().hex[:6]}:"
    client = redis.Redis.from_url(REDIS_URL)
    spark = None
    try:
        load(client, prefix)
        spark = spark_session()
        clicks = spark.createDataFrame(
            [(1, "/home"), (2, "/pricing"), (3, "/docs"), (4, "/home"), (1, "/docs")],
            "user_id INT, page STRING",
        )
        users = LookupTable(
            "Users",
            "id INT, name STRING, plan STRING",
            RedisConnector(REDIS_URL, prefix + "user:{id}"),
            {"lookup.cache": "PARTIAL", "lookup.partial-cache.max-rows": "10000"},
        )
        settings = LookupTable(
            "Settings",
            "id STRING, theme STRING, lang STRING",  # hash fields are strings
            RedisConnector(REDIS_URL, prefix + "settings:{id}", value_format="hash"),
        )
        devices = LookupTable(
            "Devices",
            "id INT, device STRING, seen INT",
            RedisConnector(REDIS_URL, prefix + "devices:{id}", value_format="json_list"),
        )
        enriched = lookup_join(
            clicks, users, on=("user_id", "id"), how="left", columns=["name", "plan"]
        )
        enriched = lookup_join(
            enriched.withColumn("uid", enriched.user_id.cast("string")),
            settings,
            on=("uid", "id"),
            how="left",
            columns=["theme"],
        ).drop("uid")
        print("clicks with the user's profile and settings (LEFT joins):")
        enriched.orderBy("user_id", "page").show()
        print("one row per device (INNER join on a non-unique key):")
        lookup_join(clicks, devices, on=("user_id", "id"), columns=["device", "seen"]).orderBy(
            "user_id", "page", "device"
        ).show()
        print("Users cache metrics:", users.metrics())
    finally:
        if spark is not None:
            spark.stop()
        keys = list(client.scan_iter(match=prefix + "*"))
        if keys:
            client.delete(*keys)
        client.close()


if __name__ == "__main__":
    main()

"""Connector registry, picklability, lazy opening and secret masking helpers."""

from __future__ import annotations

import pickle

import pytest

from asyncio_lookup.connectors import (
    HttpConnector,
    InMemoryConnector,
    PostgresConnector,
    RedisConnector,
    connector_names,
    create_connector,
    register_connector,
)
from asyncio_lookup.connectors import registry as registry_module
from asyncio_lookup.connectors._secrets import mask_headers, mask_url, redact, url_secrets
from asyncio_lookup.connectors.keys import KeyTemplate
from asyncio_lookup.errors import ConfigurationError
from asyncio_lookup.lookup.functions import LookupTableSource


def test_builtin_names() -> None:
    """The built-ins are always registered; the registry is process-wide, so other tests'
    connectors (SQL test tables) may be there too."""
    from asyncio_lookup.connectors.registry import _builtins

    assert sorted(_builtins()) == ["http", "memory", "postgres", "redis"]
    names = connector_names()
    assert set(_builtins()) <= set(names) and names == sorted(names)
    assert isinstance(create_connector("http", url="http://h/c/{id}"), HttpConnector)
    assert isinstance(
        create_connector("Redis", url="redis://h:6379/0", key_template="c:{id}"), RedisConnector
    )
    assert isinstance(
        create_connector("postgres", dsn="postgresql://h/db", table="t", key_columns="id"),
        PostgresConnector,
    )
    assert isinstance(
        create_connector("memory", rows=[{"id": 1}], key_columns=["id"]), InMemoryConnector
    )


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        create_connector("mongo")
    assert "'mongo'" in str(info.value)
    assert "http | memory | postgres | redis" in str(info.value)
    assert info.value.option == "connector"


def test_a_misspelt_or_missing_argument_is_named_not_a_bare_type_error() -> None:
    with pytest.raises(ConfigurationError, match=r"'rows_feild'.*did you mean 'rows_field'"):
        create_connector("http", url="http://h/c/{id}", rows_feild="data")
    with pytest.raises(ConfigurationError, match=r"'key_templat'.*did you mean 'key_template'"):
        create_connector("redis", url="redis://h:6379/0", key_templat="c:{id}")
    with pytest.raises(ConfigurationError, match="missing a required argument: 'url'") as info:
        create_connector("http", rows_field="data")
    assert info.value.option == "connector arguments"


def test_register_and_replace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "_factories", dict(registry_module._registry()))

    def factory(**options: object) -> InMemoryConnector:
        return InMemoryConnector([options], ["id"])

    register_connector("Custom", factory)
    made = create_connector("custom", id=5)
    assert isinstance(made, InMemoryConnector) and made.rows == [{"id": 5}]
    assert "custom" in connector_names()
    with pytest.raises(ConfigurationError, match="already registered"):
        register_connector("http", factory)
    register_connector("http", factory, replace=True)
    assert isinstance(create_connector("http", id=1), InMemoryConnector)
    with pytest.raises(ConfigurationError, match="callable"):
        register_connector("x", "not callable")  # type: ignore[arg-type]


def test_connectors_are_lazy_picklable_sources() -> None:
    """Construction opens nothing (unreachable servers are fine) and pickles whole."""
    connectors = [
        HttpConnector("http://127.0.0.1:9/c/{id}", bearer_token="t"),
        RedisConnector("redis://127.0.0.1:9/0", "c:{id}"),
        PostgresConnector("postgresql://u:p@127.0.0.1:9/db", "t", "id"),
    ]
    for c in connectors:
        assert isinstance(c, LookupTableSource)
        clone = pickle.loads(pickle.dumps(c))
        assert repr(clone) == repr(c)
        assert clone.key_columns == ("id",)
        for fn in (c.lookup_function(), c.async_lookup_function()):
            pickle.dumps(fn)  # unopened functions carry no client either


def test_mask_url() -> None:
    assert mask_url("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert mask_url("redis://:pw@h/0") == "redis://:***@h/0"
    assert mask_url("redis://h/0") == "redis://h/0"
    assert mask_url("https://h/x?token=abc&q=1") == "https://h/x?token=***&q=1"
    assert mask_url("host=h password='a b' user=u") == "host=h password=*** user=u"
    assert mask_url("postgresql://h/db?password=pw") == "postgresql://h/db?password=***"


def test_url_secrets_and_redact() -> None:
    secrets = url_secrets("postgresql://u:p%40ss@h/db?sslpassword=x9")
    assert "p@ss" in secrets and "x9" in secrets
    assert redact("failed for p@ss and p%40ss", secrets) == "failed for *** and ***"
    assert url_secrets("host=h password='se cret'") == ["se cret"]
    assert mask_headers({"Authorization": "Bearer x", "X-Api-Key": "k", "Accept": "a"}) == {
        "Authorization": "***",
        "X-Api-Key": "***",
        "Accept": "a",
    }


def test_key_template() -> None:
    t = KeyTemplate("o:{cid}:{oid}", "key_template")
    assert t.key_columns(None) == ("cid", "oid")
    assert t.format({"cid": 1, "oid": "x"}, str) == "o:1:x"
    assert t.glob() == "o:*:*"
    assert t.parser().match("o:1:x:y").groupdict() == {"cid": "1", "oid": "x:y"}
    assert KeyTemplate("a*[b]?{id}", "k").glob() == "a\\*\\[b\\]\\?*"
    with pytest.raises(ConfigurationError, match="plain column name"):
        KeyTemplate("c:{0}", "key_template")
    with pytest.raises(ConfigurationError, match="no \\{column\\} placeholder"):
        KeyTemplate("constant", "key_template").key_columns(None)

"""ASYNCIO_LOOKUP_LOG_LEVEL in a Python worker's environment (docs/tuning.md, "Seeing retries")."""

from __future__ import annotations

import logging

import pytest

from asyncio_lookup.spark import worker_log


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("asyncio_lookup")
    monkeypatch.setattr(worker_log, "_configured", False)
    monkeypatch.setattr(logger, "level", logger.level)
    monkeypatch.setattr(logger, "handlers", [])


def test_the_level_applies_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(worker_log.ENV, "debug")
    worker_log.configure_from_env()
    logger = logging.getLogger("asyncio_lookup")
    assert logger.level == logging.DEBUG
    assert logging.getLogger("asyncio_lookup.connectors.http").isEnabledFor(logging.DEBUG)
    monkeypatch.setenv(worker_log.ENV, "ERROR")
    worker_log.configure_from_env()  # the first task's setting stays
    assert logger.level == logging.DEBUG


def test_unset_or_unknown_leaves_logging_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    logger = logging.getLogger("asyncio_lookup")
    before = logger.level
    monkeypatch.delenv(worker_log.ENV, raising=False)
    worker_log.configure_from_env()
    assert logger.level == before
    monkeypatch.setattr(worker_log, "_configured", False)
    monkeypatch.setenv(worker_log.ENV, "LOUD")
    worker_log.configure_from_env()
    assert logger.level == before
    assert "ignoring ASYNCIO_LOOKUP_LOG_LEVEL='LOUD'" in capsys.readouterr().err

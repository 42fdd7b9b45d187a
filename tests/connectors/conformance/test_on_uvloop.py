"""The cases where the event loop's transports matter, again on uvloop (what Spark's Python
workers run when it is installed): 1xx before GET and POST answers, the framings (chunked with
trailers, read to the close, ``Connection: close``) in plain text and over TLS, and a restart
mid-run. The test functions are the other modules'; only the loop differs."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from tests.connectors.conformance.test_fetch import (
    test_interim_answers_before_a_post_answer,
)
from tests.connectors.conformance.test_lookups import (
    test_framings,
    test_interim_answers_go_to_the_request_that_asked,
)
from tests.connectors.conformance.test_restart import test_restart_mid_run
from tests.connectors.conformance.test_tls_and_proxies import test_framings_over_tls, tls

# pytest-asyncio 1.x: the loop-policy fixture is the way to run one module on another loop
pytestmark = pytest.mark.filterwarnings('ignore:Overriding the "event_loop_policy"')

__all__ = [
    "test_framings",
    "test_framings_over_tls",
    "test_interim_answers_before_a_post_answer",
    "test_interim_answers_go_to_the_request_that_asked",
    "test_restart_mid_run",
    "tls",
]


@pytest.fixture
def event_loop_policy() -> asyncio.AbstractEventLoopPolicy:
    return uvloop.EventLoopPolicy()

"""The state of a rate limit, apart from I/O (httpcore's manner): every method takes ``now``, so
any clock (a fake one in tests) drives it.

- :class:`TokenBucket`: ``rate`` tokens per second, at most ``burst`` saved. In any interval of
  ``T`` seconds it grants at most ``rate * T + burst`` requests.
- :class:`Aimd`: the adaptive mode's rate and concurrency: a slow start (from an eighth of the
  ceiling, doubling every 0.5 s), then halved on a throttling answer (429 / 503, or a
  ``Retry-After``) at most once per round trip and raised by ``ceiling / 10`` per second of
  successful calls back to the ceiling (TCP's additive increase, multiplicative decrease).
"""

from __future__ import annotations

import math

#: A task saves at most this many seconds of its rate (the bucket's burst), at least 1 request.
BURST_SECONDS = 0.05
#: Adaptive mode: the factor a throttling answer multiplies the rate and concurrency by ...
DECREASE = 0.5
#: ... and the seconds of successful calls that climb from 0 back to the ceiling.
RECOVERY_SECONDS = 10.0
#: The adaptive rate never drops below this fraction of the ceiling.
FLOOR_FRACTION = 0.01
#: Adaptive mode starts at this fraction of the ceiling, doubling every this many seconds.
SLOW_START_FRACTION = 0.125
SLOW_START_DOUBLING = 0.5
_SLOW_START_GAIN = math.log(2) / SLOW_START_DOUBLING
#: A token, give or take float rounding (a timer set for a token's time must find one).
WHOLE_TOKEN = 1.0 - 1e-9


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved; starts with one token, or none
    (``empty``: a bucket that stands in for an earlier one, whose token may have been spent)."""

    def __init__(self, rate: float, burst: float, now: float, *, empty: bool = False) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = 0.0 if empty else min(1.0, burst)
        self.updated = now  # tokens are counted up to here (later: nothing accrues before it)

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, now: float) -> float:
        """Take a token and return 0.0, or take nothing and return the seconds until one."""
        self._refill(now)
        if self.tokens >= WHOLE_TOKEN and now >= self.updated:
            self.tokens -= 1.0
            return 0.0
        return max(0.0, self.updated - now) + (1.0 - self.tokens) / self.rate

    def set_rate(self, rate: float, now: float) -> None:
        """Tokens saved so far count at the old rate; the burst follows the rate."""
        self._refill(now)
        self.rate = rate
        self.burst = max(1.0, rate * BURST_SECONDS)
        self.tokens = min(self.tokens, self.burst)

    def pause(self, until: float, now: float) -> None:
        """Grant nothing before ``until`` (a ``Retry-After``), saved tokens dropped."""
        self._refill(now)
        if until > self.updated:
            self.tokens = min(self.tokens, 0.0)
            self.updated = until


class Aimd:
    """The adaptive mode's rate (between ``ceiling * FLOOR_FRACTION`` and ``ceiling``) and its
    cap on calls in flight (None: no cap until the first throttling answer).

    It starts as TCP does, slowly: at ``ceiling * SLOW_START_FRACTION``, doubling every
    ``SLOW_START_DOUBLING`` seconds of successful calls, so a ceiling set above what the service
    takes is found without a second of calls at twice its rate; from the first throttling
    answer on, additive increase and multiplicative decrease."""

    def __init__(self, ceiling: float) -> None:
        self.ceiling = ceiling
        self.floor = ceiling * FLOOR_FRACTION
        self.rate = max(self.floor, ceiling * SLOW_START_FRACTION)
        self.slow_start = True
        self.step = ceiling / RECOVERY_SECONDS  # requests/s gained per second of successes
        self.concurrency: float | None = None
        self.decreased_at = -math.inf

    def throttled(self, sent_at: float, now: float, in_flight: int) -> bool:
        """A call sent at ``sent_at`` was answered "too many": decrease, unless the call was
        sent before the latest decrease (its answer says nothing about the lower rate).
        ``in_flight`` counts the calls in flight, this one included. True when decreased."""
        if sent_at < self.decreased_at:
            return False
        self.slow_start = False
        self.rate = max(self.floor, self.rate * DECREASE)
        current = in_flight if self.concurrency is None else min(self.concurrency, in_flight)
        self.concurrency = max(1.0, current * DECREASE)
        self.decreased_at = now
        return True

    def succeeded(self) -> None:
        """One successful call: in slow start ``ln 2 / SLOW_START_DOUBLING`` more rate (the rate
        doubles every ``SLOW_START_DOUBLING`` s at full pace), else ``step / rate`` (``step``
        per second at full pace); one more call in flight per round of calls."""
        if self.rate < self.ceiling:
            gain = _SLOW_START_GAIN if self.slow_start else self.step / self.rate
            self.rate = min(self.ceiling, self.rate + gain)
        if self.concurrency is not None:
            self.concurrency += 1.0 / self.concurrency

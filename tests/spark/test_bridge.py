"""spark/bridge.py's drive(): however a task's generator stops, the stream is closed on the
process loop and the reason it stopped is what goes out."""

from __future__ import annotations

import subprocess
import sys

_INTERRUPTED = """
import asyncio
from asyncio_lookup.spark.bridge import drive

closed = []

async def interrupted(done):
    raise KeyboardInterrupt  # before it could set done

async def numbers():
    try:
        for n in range(6):
            await asyncio.sleep(0.001)
            if n == 3:  # as the operator runs a function: in a task of its own, while
                done = asyncio.Event()  # the step waits for its output
                asyncio.ensure_future(interrupted(done))
                await done.wait()
            yield n
    finally:
        closed.append(True)

seen = []
try:
    for n in drive(numbers()):
        seen.append(n)
except BaseException as error:
    print(type(error).__name__, seen, closed)
"""


def test_a_keyboard_interrupt_inside_a_step_goes_out_as_itself() -> None:
    """The interrupt left the stream inside __anext__: closing it then raised RuntimeError
    ('aclose(): asynchronous generator is already running') in the interrupt's place.
    (In a process of its own: an interrupt's task is logged at exit.)"""
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "KeyboardInterrupt [0, 1, 2] [True]", done.stderr[-2000:]

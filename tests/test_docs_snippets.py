"""Every fenced ```python block of README.md and docs/*.md runs as written, indented ones
(inside a list item) included, dedented.

Each block runs in a fresh interpreter (cwd a temporary directory, ``PYSPARK_PYTHON`` this
interpreter). A block preceded by the line ``<!-- snippet: continue -->`` is appended to the
block before it, so a page can build one program over several blocks (one Spark start).
The only opt-out is ``<!-- snippet: skip (reason) -->`` right before the fence, with a reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.docs_blocks import PAGES, ROOT, Block, fenced_blocks

TIMEOUT = 180


@dataclass
class Program:
    blocks: list[Block] = field(default_factory=list)

    @property
    def name(self) -> str:
        first = self.blocks[0]
        return f"{first.page.relative_to(ROOT)}:{first.line}"

    def source(self) -> tuple[str, list[tuple[int, Block, int]]]:
        """The program text and, per block, (first program line, block, block's first line)."""
        parts: list[str] = []
        spans: list[tuple[int, Block, int]] = []
        offset = 1
        for block in self.blocks:
            spans.append((offset, block, block.line))
            parts.append(block.code)
            offset += block.code.count("\n")
        return "".join(parts), spans

    def where(self, program_line: int) -> str:
        _, spans = self.source()
        for start, block, first in reversed(spans):
            if program_line >= start:
                return f"{block.page.relative_to(ROOT)}:{first + program_line - start}"
        return self.name


def blocks(page: Path) -> list[Block]:
    return fenced_blocks(page, ("python",), "snippet")


def test_indented_fences_are_found() -> None:
    page = ROOT / "README.md"
    indented = [
        i
        for i, line in enumerate(page.read_text(encoding="utf-8").splitlines())
        if line.startswith(" ") and line.strip() == "```python"
    ]
    found = {block.line - 2 for block in blocks(page)}
    assert indented and set(indented) <= found


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def programs() -> list[Program]:
    result: list[Program] = []
    for block in all_blocks():
        if block.marker == "skip":
            continue
        if block.marker == "continue":
            assert result and result[-1].blocks[-1].page == block.page, block
            result[-1].blocks.append(block)
        else:
            result.append(Program([block]))
    return result


def test_markers_are_known_and_skips_have_a_reason() -> None:
    for block in all_blocks():
        where = f"{block.page.relative_to(ROOT)}:{block.line}"
        assert block.marker in (None, "skip", "continue"), f"{where}: unknown marker"
        if block.marker == "skip":
            assert block.reason and block.reason.strip(), f"{where}: a skip needs a reason"
    assert any(program.blocks for program in programs())


@pytest.mark.spark
@pytest.mark.parametrize("program", programs(), ids=lambda p: p.name)
def test_snippet_runs(program: Program, tmp_path: Path) -> None:
    source, _ = program.source()
    script = tmp_path / "snippet.py"
    script.write_text(source, encoding="utf-8")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONUNBUFFERED="1")
    # A local Spark Connect session started by other tests in this process leaves these set;
    # a snippet is a fresh user program and starts its own classic session.
    for name in [n for n in env if n.startswith(("SPARK_CONNECT", "SPARK_LOCAL_REMOTE"))]:
        del env[name]
    env.pop("SPARK_REMOTE", None)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{program.name}: did not finish in {TIMEOUT} s")
    if done.returncode != 0:
        pattern = rf'File "{re.escape(str(script))}", line (\d+)'
        lines = [int(n) for n in re.findall(pattern, done.stderr)]
        where = program.where(lines[-1]) if lines else program.name
        tail = "\n".join(done.stderr.strip().splitlines()[-25:])
        pytest.fail(f"snippet failed at {where} (exit {done.returncode}):\n{tail}")

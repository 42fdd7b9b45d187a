"""The fenced code blocks of the README and docs/ that the docs tests run, each with the marker
comment on the line above it (``<!-- <word>: marker (reason) -->``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Block:
    page: Path
    line: int  # the first code line, 1-based
    code: str
    language: str
    marker: str | None = None
    reason: str | None = None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def fenced_blocks(page: Path, languages: tuple[str, ...], marker_word: str) -> list[Block]:
    """The blocks of ``page`` fenced as one of ``languages`` (indented fences too), dedented."""
    fence_re = re.compile(r"^( *)```(" + "|".join(map(re.escape, languages)) + r")\s*$")
    marker_re = re.compile(
        r"^<!--\s*" + re.escape(marker_word) + r":\s*(\w+)\s*(?:\((.*)\))?\s*-->\s*$"
    )
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = fence_re.match(lines[i].rstrip("\n"))
        if not fence:
            i += 1
            continue
        indent = len(fence.group(1))
        start = end = i + 1
        while end < len(lines) and not _closes(lines[end], indent):
            end += 1
        code = "".join(_dedent(line, indent) for line in lines[start:end])
        block = Block(page, start + 1, code, fence.group(2))
        marker = marker_re.match(lines[i - 1].strip()) if i > 0 else None
        if marker:
            block.marker, block.reason = marker.group(1), marker.group(2)
        found.append(block)
        i = end + 1
    return found


def _closes(line: str, indent: int) -> bool:
    """A closing fence of a block opened at ``indent`` (CommonMark: up to 3 spaces more)."""
    stripped = line.lstrip(" ")
    return stripped.startswith("```") and len(line) - len(stripped) <= indent + 3


def _dedent(line: str, indent: int) -> str:
    """``line`` without the fence's indentation (a blank line may have less)."""
    head = line[:indent]
    assert not head.strip(), f"a code line indented less than its fence: {line!r}"
    return line[indent:]

"""The repository's tracked files, copied: for tests that build or run the project as a user's
clone would, outside the checkout (whose ``build/`` and ``.venv`` are the test run's own)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def copy_tracked_files(target: Path) -> None:
    """Copy every file ``git ls-files`` lists to the same relative path under ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    for name in filter(None, listed.stdout.split("\0")):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, target / name)

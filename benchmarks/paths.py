"""Where the repository is: the benchmarks start Spark workers and subprocesses from it."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

"""Instructions per row of the lookup join's task, counted by callgrind: a before/after that
does not move with the machine.

CPU-time figures of the same code on this VM vary by 15 % from run to run, and a change worth
1-2 % of a row's CPU cannot be seen in them. Instructions executed repeat within about 2 %
(the loop's passes still follow real time: how many timers or answers one pass handles
varies), so a difference of 3 % or more between roots in one run is the code's. Each variant
runs in its own process under ``valgrind --tool=callgrind`` for two row counts;
``(Ir(large) - Ir(small)) / (large - small)`` cancels interpreter start, imports and
warm-up. Variants (:mod:`benchmarks.join_path`):

- ``path``: the join's task (``LookupJoinTask`` over Arrow batches) against the timer stand-in
  for the service (no I/O): the operator, the lookup chain and Arrow in and out;
- ``hand``: the hand-written equivalent over the same stand-in (a task per row, the output
  built column-wise);
- ``http``: the join's task over the real ``HttpConnector`` against the bench's latency server
  in its own process (not under valgrind): the above plus the HTTP client;
- ``client``: the same connector's lookup function alone, ``CAPACITY`` coroutines over the same
  keys (one process of the ceiling): ``http - client`` is what the join adds to the client.

``--root DIR`` (repeatable) imports the package and the benchmarks from ``DIR`` (a ``git
worktree`` of another commit, say) instead of this checkout, for a before/after in one run.

    python -m benchmarks.instructions [--variants path,hand,http,client] [--rows 2000,12000]
        [--root DIR ...]

Needs valgrind (Debian's package). Takes about 40 s per variant and root (two processes run
at once, one per core).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.paths import REPO_ROOT

VARIANTS = ("path", "hand", "http", "client")
_COLLECTED = re.compile(r"Collected : (\d+)")


# The child imports nothing before its root is first on the path: the package and the
# benchmarks come from that root, not from this checkout.
CHILD = """
import sys
root, variant, rows, base_url = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, root)
from benchmarks import join_path
batches = join_path.orders(rows)
if variant in ("http", "client"):
    name = "path" if variant == "http" else "client"
    joined = join_path.http_variants(base_url, "ordered")[name](batches)
else:
    joined = join_path.VARIANTS["hand-written" if variant == "hand" else "path"](batches, 0.001)
assert joined == rows, (variant, joined, rows)
"""


def instructions(root: Path, variant: str, rows: int, base_url: str) -> int:
    """Instructions the whole child process executed (callgrind's ``Collected``)."""
    with tempfile.TemporaryDirectory(prefix="callgrind-") as out:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.out",
             sys.executable, "-c", CHILD, str(root), variant, str(rows), base_url],
            cwd=root, capture_output=True, text=True, check=False,
        )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{variant} ({root}, {rows} rows) failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("--variants", default="path,hand,http,client")
    parser.add_argument("--rows", default="2000,12000", help="the small and the large count")
    parser.add_argument("--root", action="append", type=Path, default=[])
    options = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    variants = [v for v in options.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {VARIANTS}")
    small, large = (int(n) for n in options.rows.split(","))
    roots = [root.resolve() for root in options.root] or [REPO_ROOT]

    from benchmarks.server_process import ServerProcess

    with ServerProcess("latency", 0.010, 100_000) as server:
        jobs = [(r, v, n) for r in roots for v in variants for n in (small, large)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(zip(jobs, pool.map(
                lambda job: instructions(job[0], job[1], job[2], server.base_url), jobs),
                strict=True))
    print(f"instructions per row, ({large:,} rows - {small:,} rows) / {large - small:,}:")
    for root in roots:
        for variant in variants:
            per_row = (counts[(root, variant, large)] - counts[(root, variant, small)]) / (
                large - small
            )
            print(f"  {variant:>5}  {per_row:10,.0f}  {root}")


if __name__ == "__main__":
    main()

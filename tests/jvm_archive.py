"""The JVM options of every JVM the tests start, and the class-data-sharing archive they use.

Much of the suite's CPU is JVMs starting: each Spark session (in the test process or in one of
the many subprocess jobs) loads and verifies Spark's classes from its jars. A dynamic CDS
archive of the classes a session loads (JDK 13+, ``-XX:ArchiveClassesAtExit``) cuts a session
start, two small jobs and a stop from about 13.5 to 7 s of machine CPU here, a Connect
session's too. It changes no behaviour: a JVM whose class path or build does not match the
archive ignores it (logging off, so it says nothing) and loads its classes as before.

``python -m tests.jvm_archive PATH`` builds the archive at PATH (``make test`` builds
``.venv/spark-classes.jsa`` once per install); :func:`jvm_options` adds it when it is there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: C1 alone and the serial collector: tiny jobs in short-lived JVMs on two cores (docs/design.md).
BASE_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: A JVM that cannot use the archive (another class path, another JDK) says so on stdout.
QUIET = "-Xlog:cds=off,cds+dynamic=off"
ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"


def jvm_options(archive: Path = ARCHIVE) -> str:
    """The tests' ``JDK_JAVA_OPTIONS``: the base options, and the archive if it was built."""
    if archive.is_file():
        return f"{BASE_OPTIONS} -XX:SharedArchiveFile={archive} {QUIET}"
    return BASE_OPTIONS


def _workload() -> None:
    """What the tests' JVMs do most: a session, an Arrow UDF job, a join, SQL. (Connect's own
    classes are not worth their dump time: a Connect session starts as fast without them.)"""
    from tests.spark.job_session import job_session

    spark, _ = job_session("classic", "jvm-archive", "local[2]", reuse_workers=True)
    rows = spark.range(0, 1000, 1, numPartitions=2).selectExpr("id", "CAST(id % 7 AS STRING) AS k")
    mapped = rows.mapInArrow(lambda batches: batches, rows.schema)
    joined = mapped.join(rows.withColumnRenamed("id", "id2"), "k").groupBy("k").count()
    joined.orderBy("k").collect()
    spark.sql("SELECT CAST('2026-01-01' AS TIMESTAMP) AS t, 1.5BD AS d").collect()
    jvm = spark.sparkContext._gateway.proc  # spark-submit, which became the driver's JVM
    spark.stop()
    jvm.stdin.close()  # as at this process's exit: the JVM exits and writes the archive
    jvm.wait(timeout=300)


def build(path: Path) -> None:
    """Runs :func:`_workload` in a JVM that writes the classes it loaded to ``path`` at exit."""
    from tests.checkout import ROOT
    from tests.spark.job_session import classic_env

    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    env = dict(
        classic_env(),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        JDK_JAVA_OPTIONS=BASE_OPTIONS,
        # the driver's JVM only: spark-submit's launcher JVM would write its own small archive
        PYSPARK_SUBMIT_ARGS=f'--driver-java-options "-XX:ArchiveClassesAtExit={partial} {QUIET}"'
        " pyspark-shell",
    )
    subprocess.run(
        [sys.executable, "-m", "tests.jvm_archive", "--workload"],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    if not partial.is_file():
        raise SystemExit(f"the JVM wrote no class archive at {partial}")
    partial.replace(path)


if __name__ == "__main__":
    if sys.argv[1:] == ["--workload"]:
        _workload()
    else:
        (target,) = sys.argv[1:]
        build(Path(target))

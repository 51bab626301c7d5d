"""A SparkSession with Spark's Kafka source and sink on its classpath, and no network at run
time: the jars come from the folder spark/setup.sh fills from Maven Central (or, in the Spark
image, from Spark's own jars/ folder, where the Dockerfile puts them)."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark.sql import SparkSession

JARS_ENV = "KAFKUBE_SPARK_JARS"
KAFKA_SOURCE_JAR = "spark-sql-kafka-0-10_2.13-{version}.jar"


class MissingJars(RuntimeError):
    pass


def kafka_jars() -> list[Path]:
    """The jars to add to Spark's classpath; none when Spark ships them already."""
    import pyspark

    version = pyspark.__version__
    source_jar = KAFKA_SOURCE_JAR.format(version=version)
    # Under spark-submit pyspark is imported from SPARK_HOME/python/lib's zip, so Spark's jars
    # are SPARK_HOME's; as a plain pip package, they sit beside its modules.
    spark_home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    if (spark_home / "jars" / source_jar).exists():
        return []
    cache = Path(os.environ.get("KAFKUBE_CACHE", Path.home() / ".cache" / "kafkube"))
    folder = Path(os.environ.get(JARS_ENV) or cache / f"spark-jars-{version}")
    if not (folder / source_jar).exists():
        raise MissingJars(f"{source_jar} is neither in pyspark's jars/ nor in {folder}: run "
                          f"`bash spark/setup.sh` (or set {JARS_ENV} to a folder holding it)")
    return sorted(folder.glob("*.jar"))


def spark_session(app: str, master: str | None = None) -> SparkSession:
    """Under spark-submit the master and resources come from its command line; run as a plain
    Python program, ``master`` (e.g. ``local[2]``) says where."""
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    if (master or "").startswith("local"):
        # One process on this machine: its driver's ports on loopback, not on whatever
        # address the host name resolves to.
        builder = builder.config("spark.driver.host", "127.0.0.1") \
            .config("spark.driver.bindAddress", "127.0.0.1")
    jars = kafka_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    # Windows are cut in UTC whatever the machine's zone; a few shuffle partitions suit the
    # small aggregates (Spark's default of 200 would make 200 tiny files per micro-batch).
    builder = builder.config("spark.sql.session.timeZone", "UTC") \
        .config("spark.sql.shuffle.partitions", "4") \
        .config("spark.ui.enabled", "false") \
        .config("spark.ui.showConsoleProgress", "false")
    return builder.getOrCreate()

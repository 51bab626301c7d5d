"""Command-line options the jobs share, with Spark's and Kafka's names where they have one."""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from kafkube_spark.session import MissingJars, spark_session


def common_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092",
                        help="the cluster's bootstrap servers (kafka.bootstrap.servers)")
    parser.add_argument("--topic", default="orders", help="the topic of order events")
    parser.add_argument("--output", default=None,
                        help="folder of the Parquet totals (a local path, or any URI Spark "
                             "writes to; on Kubernetes, storage every executor reaches)")
    parser.add_argument("--result-topic", default=None,
                        help="also write the totals to this topic, keyed window/category")
    parser.add_argument("--master", default=None,
                        help="Spark master when run as a plain Python program, e.g. "
                             "local[2]; under spark-submit its --master applies")
    return parser


def session_for(parser: argparse.ArgumentParser, app: str, master: str | None) -> SparkSession:
    """The job's SparkSession; without the connector's jars, the command's usage error
    saying how to get them (exit 2), not a JVM stack trace."""
    try:
        return spark_session(app, master)
    except MissingJars as e:
        parser.exit(2, f"{parser.prog}: {e}\n")

"""The batch job: the totals per minute and category over a bounded range of the topic, chosen
by offsets (``startingOffsets``/``endingOffsets``) or by record time (``startingTimestamp``/
``endingTimestamp``, answered by the brokers' ListOffsets by timestamp), written to Parquet
and/or a result topic, and printed as a table.

    python -m kafkube_spark.batch --bootstrap-servers 127.0.0.1:9092 --topic orders \\
        --output /tmp/batch-totals --ending-offsets '{"orders":{"0":500,"1":500}}'
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import DataFrame, SparkSession

from kafkube_spark.events import Total
from kafkube_spark.options import common_parser, session_for
from kafkube_spark.pipeline import as_records, kafka_options, parse_orders, window_totals
from kafkube_spark.report import table


def bounds(starting_offsets: str | None, ending_offsets: str | None,
           starting_timestamp: int | None, ending_timestamp: int | None) -> dict[str, str]:
    """The source's range options; a timestamp bound replaces the offsets bound on its side
    (Spark refuses both at once)."""
    options = {}
    if starting_timestamp is not None:
        options["startingTimestamp"] = str(starting_timestamp)
    elif starting_offsets:
        options["startingOffsets"] = starting_offsets
    if ending_timestamp is not None:
        options["endingTimestamp"] = str(ending_timestamp)
    elif ending_offsets:
        options["endingOffsets"] = ending_offsets
    return options


def batch_totals(spark: SparkSession, bootstrap: str, topic: str,
                 range_options: dict[str, str]) -> DataFrame:
    records = spark.read.format("kafka").options(**kafka_options(bootstrap, topic)) \
        .options(**range_options).load()
    return window_totals(parse_orders(records))


def _offsets(text: str) -> str:
    """earliest, latest, or Spark's JSON of offsets per topic and partition."""
    if text in ("earliest", "latest"):
        return text
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not earliest, latest or JSON: {e}") from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ValueError('JSON of the form {"topic": {"0": 23, "1": -2}}')
    return text


def main(argv: list[str] | None = None) -> int:
    parser = common_parser("python -m kafkube_spark.batch", __doc__.split("\n\n")[0])
    parser.add_argument("--starting-offsets", type=_offsets, default="earliest")
    parser.add_argument("--ending-offsets", type=_offsets, default="latest")
    parser.add_argument("--starting-timestamp", type=int, default=None,
                        help="epoch ms: start each partition at its first record at or "
                             "after this time (instead of --starting-offsets)")
    parser.add_argument("--ending-timestamp", type=int, default=None,
                        help="epoch ms: end each partition before its first record at or "
                             "after this time (instead of --ending-offsets)")
    args = parser.parse_args(argv)
    if not (args.output or args.result_topic):
        parser.error("say where the totals go: --output, --result-topic or both")
    spark = session_for(parser, "kafkube-orders-batch", args.master)
    try:
        totals = batch_totals(spark, args.bootstrap_servers, args.topic, bounds(
            args.starting_offsets, args.ending_offsets, args.starting_timestamp,
            args.ending_timestamp)).persist()
        if args.output:
            totals.write.mode("overwrite").parquet(args.output)
        if args.result_topic:
            as_records(totals).write.format("kafka") \
                .option("kafka.bootstrap.servers", args.bootstrap_servers) \
                .option("topic", args.result_topic).save()
        rows = [Total(r.window_start, r.category, r.orders, r.revenue_cents)
                for r in totals.collect()]
        print(table(rows))
        print(f"batch: {len(rows)} window totals written to "
              f"{' and '.join(filter(None, [args.output, args.result_topic]))}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The streaming job: order events → totals per minute of event time and category, emitted
once the watermark has passed their window, written exactly once to Parquet (Spark's file
sink and its checkpoint) and to a result topic in the cluster.

    python -m kafkube_spark.stream --bootstrap-servers 127.0.0.1:9092 --topic orders \\
        --output /tmp/totals --checkpoint /tmp/checkpoint --result-topic order-totals

Two queries over one plan, each with a checkpoint of its own (``<checkpoint>/parquet``,
``<checkpoint>/kafka``). Parquet is exactly once: a batch's files count only once Spark's
``_spark_metadata`` log lists them, and a restart replays the batch from the checkpointed
offsets. Spark's Kafka sink is at-least-once; the records are keyed by window and category,
so a compacted result topic ends with one record per key whatever is replayed.
"""

from __future__ import annotations

import re
import sys

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from kafkube_spark.options import common_parser, session_for
from kafkube_spark.pipeline import as_records, kafka_options, parse_orders, window_totals

_INTERVAL = re.compile(r"^\d+(\.\d+)?\s*(ms|milliseconds?|s|seconds?|minutes?)$")


def totals_stream(spark: SparkSession, bootstrap: str, topic: str, watermark: str,
                  starting_offsets: str, max_offsets: int | None) -> DataFrame:
    reader = spark.readStream.format("kafka").options(**kafka_options(bootstrap, topic)) \
        .option("startingOffsets", starting_offsets)
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    orders = parse_orders(reader.load()).withWatermark("event_time", watermark)
    return window_totals(orders)


def start(totals: DataFrame, output: str, checkpoint: str, bootstrap: str,
          result_topic: str | None, trigger: str) -> list[StreamingQuery]:
    when = {"availableNow": True} if trigger == "available-now" \
        else {"processingTime": trigger}
    queries = [totals.writeStream.format("parquet").outputMode("append")
               .option("path", output).option("checkpointLocation", f"{checkpoint}/parquet")
               .queryName("totals_parquet").trigger(**when).start()]
    if result_topic:
        queries.append(as_records(totals).writeStream.format("kafka").outputMode("append")
                       .option("kafka.bootstrap.servers", bootstrap)
                       .option("topic", result_topic)
                       .option("checkpointLocation", f"{checkpoint}/kafka")
                       .queryName("totals_kafka").trigger(**when).start())
    return queries


def main(argv: list[str] | None = None) -> int:
    parser = common_parser("python -m kafkube_spark.stream", __doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint folder; keep it (durable storage on Kubernetes) to "
                             "resume where the job stopped")
    parser.add_argument("--watermark", default="10 minutes",
                        help="how late an event may arrive, in event time (withWatermark)")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="startingOffsets for a new checkpoint: earliest, latest or JSON")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None,
                        help="maxOffsetsPerTrigger: records per micro-batch, at most")
    parser.add_argument("--trigger", default="available-now",
                        help="'available-now' (process what is there, then stop) or a "
                             "processing-time interval such as '5 seconds' (run until "
                             "stopped)")
    args = parser.parse_args(argv)
    if not args.output:
        parser.error("--output is required: the Parquet sink is the job's exactly-once output")
    if args.trigger != "available-now" and not _INTERVAL.match(args.trigger):
        parser.error(f"--trigger {args.trigger!r}: 'available-now' or an interval such as "
                     "'5 seconds'")
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error("--max-offsets-per-trigger must be at least 1")
    spark = session_for(parser, "kafkube-orders-stream", args.master)
    totals = totals_stream(spark, args.bootstrap_servers, args.topic, args.watermark,
                           args.starting_offsets, args.max_offsets_per_trigger)
    queries = start(totals, args.output, args.checkpoint, args.bootstrap_servers,
                    args.result_topic, args.trigger)
    try:
        wait(spark, queries)
    except StreamingQueryException as e:
        print(f"stream: a query failed: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


def wait(spark: SparkSession, queries: list[StreamingQuery]) -> None:
    """Until every query has ended (available-now) or one fails: then the others are stopped
    too, and the failure raised."""
    while any(q.isActive for q in queries):
        try:
            spark.streams.awaitAnyTermination()
        except StreamingQueryException:
            for query in queries:
                query.stop()
            raise
        spark.streams.resetTerminated()


if __name__ == "__main__":
    sys.exit(main())

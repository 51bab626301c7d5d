"""The transformation both jobs share: Kafka records → orders → totals per event-time window
and category. Spark's own column functions only, so the plan runs in the JVM and the Python
process only builds it."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from kafkube_spark.events import WINDOW_MS

ORDER_SCHEMA = StructType([
    StructField("order_id", LongType()),
    StructField("customer", StringType()),
    StructField("category", StringType()),
    StructField("amount_cents", LongType()),
    StructField("ts", LongType()),
])
WINDOW = f"{WINDOW_MS // 1000} seconds"
TOTALS_COLUMNS = ("window_start", "category", "orders", "revenue_cents")


def kafka_options(bootstrap_servers: str, topic: str) -> dict[str, str]:
    """The source's options every job sets. ``failOnDataLoss`` stays Spark's default (true):
    offsets that vanish under a running job (retention, a truncated log) stop it loudly.
    ``read_committed``: orders of a transaction its producer aborted never count, and those
    of an open one count once it commits (the source reads up to the last stable offset);
    for a topic without transactions it changes nothing."""
    return {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic,
            "kafka.isolation.level": "read_committed"}


def parse_orders(records: DataFrame) -> DataFrame:
    """Orders from the source's rows; a value that is not an order's JSON (or lacks its event
    time or category) is dropped rather than failing the job."""
    order = F.from_json(F.col("value").cast("string"), ORDER_SCHEMA)
    return (records.select(order.alias("o")).select("o.*")
            .where(F.col("ts").isNotNull() & F.col("category").isNotNull()
                   & F.col("amount_cents").isNotNull())
            .withColumn("event_time", F.timestamp_millis(F.col("ts"))))


def window_totals(orders: DataFrame) -> DataFrame:
    """Orders and revenue per one-minute tumbling window of event time and category."""
    window = F.window(F.col("event_time"), WINDOW)
    return (orders.groupBy(window.alias("w"), F.col("category"))
            .agg(F.count(F.lit(1)).alias("orders"),
                 F.sum("amount_cents").alias("revenue_cents"))
            .select(F.unix_millis(F.col("w.start")).alias("window_start"),
                    "category", "orders", "revenue_cents"))


def as_records(totals: DataFrame) -> DataFrame:
    """Totals as the result topic's records: keyed by window and category, so the topic can
    be compacted and a batch the sink writes twice (it is at-least-once) rewrites one key."""
    key: Column = F.concat_ws("/", F.col("window_start").cast("string"), F.col("category"))
    value = F.to_json(F.struct(*TOTALS_COLUMNS))
    return totals.select(key.alias("key"), value.alias("value"))

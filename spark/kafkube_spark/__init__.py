"""kafkube's Spark pipeline: PySpark jobs that read a kafkube (or any Kafka) cluster with Spark's
built-in Kafka source, the way Spark users read Kafka (docs/spark.md)."""

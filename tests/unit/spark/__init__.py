"""Unit tests of the Spark jobs (spark/kafkube_spark) that need no Spark and no broker."""

"""readStream builders. Both yield raw records: ``raw`` bytes plus their coordinates (see model.RAW_DDL)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from replicator.config import JobConfig, KafkaOptions

# *.jsonl: one message per line; *.json: one document (a message or an array of messages);
# *.avro: one Avro object container file (a record of its own); *.b64: one base64 Avro datum per line
# (a dump of Kafka values). See docs/configuration.md.
FILE_GLOB = "*.{json,jsonl,avro,b64}"
BINARY_FILE_SCHEMA = "path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY"


def file_records(files: DataFrame) -> DataFrame:
    """Split binaryFile rows (path, modificationTime, content) into raw records.

    Lines are split on the byte 0x0A after a lossless ISO-8859-1 decode, so every record keeps its exact
    bytes (invalid UTF-8 included) for the decoder and for dead letters. Blank lines are not records.
    """
    from pyspark.sql import functions as F

    whole = F.col("path").endswith(".json") | F.col("path").endswith(".avro")
    lines = F.when(whole, F.array(F.col("text"))).otherwise(F.split(F.col("text"), "\n"))
    base64_lines = F.col("path").endswith(".b64")
    return (
        files.select(
            "path",
            (F.unix_millis(F.col("modificationTime"))).alias("mtime"),
            F.decode("content", "ISO-8859-1").alias("text"),
        )
        .select("path", "mtime", F.posexplode(lines).alias("line", "body"))
        .where(F.col("path").endswith(".avro") | (F.trim(F.regexp_replace("body", "\r$", "")) != ""))
        .select(
            F.when(base64_lines, F.unbase64(F.trim(F.col("body"))))
            .when(F.col("path").endswith(".avro"), F.encode(F.col("body"), "ISO-8859-1"))
            .otherwise(F.encode(F.regexp_replace("body", "\r$", ""), "ISO-8859-1"))
            .alias("raw"),
            F.struct(
                F.col("path").alias("source"),
                F.col("mtime").alias("partition"),
                (F.col("line") + 1).cast("bigint").alias("offset"),
                F.lit(0).alias("index"),
                F.lit(0).alias("row"),
            ).alias("coordinates"),
        )
    )


def files_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    reader = (
        spark.readStream.format("binaryFile").schema(BINARY_FILE_SCHEMA).option("pathGlobFilter", FILE_GLOB)
    )
    reader = reader.option("recursiveFileLookup", "true")
    if config.source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(config.source.max_files_per_trigger))
    return file_records(reader.load(str(config.source.path)))


def kafka_options(options: KafkaOptions) -> dict[str, str]:
    """The ``format("kafka")`` options a job file asks for (testable without the connector jars)."""
    built = {
        "kafka.bootstrap.servers": options.bootstrap_servers,
        "startingOffsets": options.starting_offsets,
        "failOnDataLoss": str(options.fail_on_data_loss).lower(),
        "includeHeaders": "false",
    }
    if options.topics:
        built["subscribe"] = ",".join(options.topics)
    else:
        built["subscribePattern"] = str(options.topic_pattern)
    if options.max_offsets_per_trigger:
        built["maxOffsetsPerTrigger"] = str(options.max_offsets_per_trigger)
    built.update(options.options)
    return built


def kafka_records(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return frame.where(F.col("value").isNotNull()).select(
        F.col("value").alias("raw"),
        F.struct(
            F.col("topic").alias("source"),
            F.col("partition").cast("bigint").alias("partition"),
            F.col("offset").cast("bigint").alias("offset"),
            F.lit(0).alias("index"),
            F.lit(0).alias("row"),
        ).alias("coordinates"),
    )


def kafka_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    """Needs Spark's Kafka connector on the classpath: ``spark-submit --packages
    org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``. Kafka tombstones (null values) that follow
    Debezium deletes are not records."""
    assert config.source.kafka is not None
    reader = spark.readStream.format("kafka").options(**kafka_options(config.source.kafka))
    return kafka_records(reader.load())


def build_stream(spark: SparkSession, config: JobConfig) -> DataFrame:
    builders = {"files": files_stream, "kafka": kafka_stream}
    return builders[config.source.type](spark, config)


def read_files_batch(spark: SparkSession, path: str) -> DataFrame:
    """The same records as the stream, read once (for ``decode`` and tests)."""
    frame = spark.read.format("binaryFile").option("pathGlobFilter", FILE_GLOB)
    return file_records(frame.option("recursiveFileLookup", "true").load(path))

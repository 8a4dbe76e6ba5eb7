"""Reads a featurelog Delta table with independent readers, the `deltalake` package (delta-rs)
and Polars' `read_delta`, and with `--spark` also Spark with delta-spark, and prints what each
sees as JSON: the table's version and schema, and the rows (request id, item id, clicks, dt,
hr), sorted; with `--spark`, also Spark's rows ("spark") and its type of each column
("spark_schema", as Spark SQL names them). A table partitioned by model also gets "models":
per reader, each row's (request id, `model` partition value, `model_name`), sorted.

usage: read_delta.py [--spark] TABLE_DIR_OR_S3_URL

For an `s3://` table, the endpoint and credentials come from the environment as the AWS tools
read them (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).

Spark is a local session whose Delta jars (io.delta:delta-spark_2.13 of the installed
delta-spark, and for `s3://` hadoop-aws, matching pyspark's Hadoop 3.4.1) Ivy fetches from
Maven Central once into its cache (~/.ivy2.5.2). Starting it takes seconds, which is why it is
a flag: a test polling for rows reads without it, and only its final check starts Spark.
"""

import json
import os
import sys

import deltalake
import deltalake.exceptions
import polars as pl

COLUMNS = ["request_id", "item_id", "clicks", "dt", "hr"]
MODEL_COLUMNS = ["request_id", "model", "model_name"]
# The hadoop-aws of pyspark's own hadoop-client jars (pyspark/jars/hadoop-client-api-*.jar):
# s3a must match the Hadoop it runs in.
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.4.1"


def plain(row):
    return [v if isinstance(v, (int, str, type(None))) else str(v) for v in row]


def read_with_spark(path):
    """The rows and column types of the table at `path` as Spark with delta-spark reads them."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[1]")
        .appName("read-delta")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "512m")
        # The JVM lives for seconds on a small table: the optimizing compiler would not pay
        # back its own cost (a third less time here).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "1")
        # Delta reconstructs the table's state in 50 partitions by default: seconds of tasks
        # on a log of a few commits.
        .config("spark.databricks.delta.snapshotPartitions", "1")
        # Delta refuses to read without its extension and catalog.
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    )
    extra = []
    if path.startswith("s3://"):
        # Hadoop reads S3 only as s3a://, configured here from what the AWS tools read.
        path = "s3a://" + path[len("s3://"):]
        extra = [HADOOP_AWS]
        endpoint = os.environ.get("AWS_ENDPOINT_URL")
        settings = {
            "fs.s3a.access.key": os.environ.get("AWS_ACCESS_KEY_ID"),
            "fs.s3a.secret.key": os.environ.get("AWS_SECRET_ACCESS_KEY"),
            "fs.s3a.endpoint": endpoint,
            "fs.s3a.endpoint.region": os.environ.get("AWS_REGION", "us-east-1"),
            # A test server has no virtual-host bucket names.
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": str(bool(endpoint and endpoint.startswith("https:"))).lower(),
            "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }
        for key, value in settings.items():
            if value is not None:
                builder = builder.config(f"spark.hadoop.{key}", value)
    spark = configure_spark_with_delta_pip(builder, extra_packages=extra).getOrCreate()
    try:
        frame = spark.read.format("delta").load(path)
        schema = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        rows = sorted(plain(list(r)) for r in frame.select(COLUMNS).collect())
        models = None
        if "model" in schema:
            models = sorted(plain(list(r)) for r in frame.select(MODEL_COLUMNS).collect())
    finally:
        spark.stop()
    return rows, schema, models


args = sys.argv[1:]
spark = "--spark" in args
path = [a for a in args if a != "--spark"][0]
options = None
if path.startswith("s3://"):
    options = {
        k.lower(): os.environ[k]
        for k in ["AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP"]
        if k in os.environ
    }
try:
    table = deltalake.DeltaTable(path, storage_options=options)
except deltalake.exceptions.TableNotFoundError:
    # Not created yet (a test polling for rows): nothing to read.
    json.dump({"version": None, "partitions": [], "schema": {}, "deltalake": [], "polars": []}, sys.stdout)
    sys.exit(0)
arrow = table.to_pyarrow_table(columns=COLUMNS)
by_deltalake = sorted(plain([r[c] for c in COLUMNS]) for r in arrow.to_pylist())
frame = pl.read_delta(path, storage_options=options).select(COLUMNS)
by_polars = sorted(plain(list(r)) for r in frame.rows())
out = {
    "version": table.version(),
    "partitions": table.metadata().partition_columns,
    "schema": {f.name: str(f.type) for f in arrow.schema},
    "deltalake": by_deltalake,
    "polars": by_polars,
}
by_model = "model" in out["partitions"]
if by_model:
    out["models"] = {
        "deltalake": sorted(
            plain([r[c] for c in MODEL_COLUMNS])
            for r in table.to_pyarrow_table(columns=MODEL_COLUMNS).to_pylist()
        ),
        "polars": sorted(
            plain(list(r)) for r in pl.read_delta(path, storage_options=options).select(MODEL_COLUMNS).rows()
        ),
    }
if spark:
    out["spark"], out["spark_schema"], spark_models = read_with_spark(path)
    if by_model:
        out["models"]["spark"] = spark_models
json.dump(out, sys.stdout)

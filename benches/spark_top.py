"""The top-20 leaf functions of a perfpipe Parquet dataset with Spark, and its row count.

    python3 benches/spark_top.py DIR        # DIR: perfpipe -o DIR/ [--rotate ...]; local[*]

On a cluster the same file is the job, with the master and the storage of the cluster:

    spark-submit --master yarn --packages org.apache.hadoop:hadoop-aws:3.4.1 \\
        benches/spark_top.py s3a://bucket/profiles/

The dataset is Hive-partitioned by host and date, so a filter on them (`where host = 'db1' and
date >= '2026-12-01'`) reads only those files. Spark 4 runs in ANSI mode, where `element_at` of
an empty array is an error: the leaf is `try_element_at(stack, -1)`, NULL for a sample whose
stack is empty (perf recorded no callchain for it), and such samples are counted under NULL.
`tests/dataset.rs` runs `top_leaves` on Spark 4 against `perf report`.
"""
import sys
import time

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F


def leaf() -> Column:
    """The innermost frame's function; NULL for an empty stack."""
    return F.try_element_at("stack", F.lit(-1)).getField("function")


def top_leaves(df: DataFrame, n: int = 20) -> list:
    """The `n` leaf functions with the most samples: rows of (leaf, samples, weight), weight the
    sum of the samples' periods; an empty stack's samples count under a NULL leaf."""
    return (
        df.groupBy(leaf().alias("leaf"))
        .agg(F.count("*").alias("samples"), F.sum("period").alias("weight"))
        .orderBy(F.desc("samples"), F.asc_nulls_last("leaf"))
        .limit(n)
        .collect()
    )


def session(master: str | None = None) -> SparkSession:
    """A session for a small machine: no web UI, 2 shuffle partitions, a JVM that compiles
    little (C1 only, the serial collector), which halves the time of a query this size on 2
    cores. Without `master`, spark-submit's `--master` (plain `python3`: `local[*]`)."""
    builder = (
        SparkSession.builder.appName("perfpipe-top")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    )
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list) -> None:
    path = argv[1]
    spark = session()
    t = time.perf_counter()
    df = spark.read.option("basePath", path).parquet(path)
    top = top_leaves(df)
    rows = df.count()
    empty = df.where(F.size("stack") == 0).count()
    hosts = df.select("host").distinct().count()
    print(
        f"Spark {spark.version} ({spark.sparkContext.master}): {rows} rows ({empty} with an "
        f"empty stack), {hosts} host(s), top leaf {top[0]['leaf']!r}, "
        f"{time.perf_counter() - t:.1f} s"
    )
    spark.stop()


if __name__ == "__main__":
    main(sys.argv)

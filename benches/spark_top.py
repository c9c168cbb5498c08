"""The top-20 leaf functions of a perfpipe Parquet dataset with Spark (local mode).

    python3 benches/spark_top.py DIR        # DIR: perfpipe --parquet -o DIR/ [--rotate ...]

On a cluster the same code runs with the session built by `spark-submit --master yarn` (or
`k8s://…`) and DIR on shared storage (`s3a://bucket/profiles/`): the dataset is Hive-partitioned
by host and date, so `where host = 'db1' and date >= '2026-12-01'` reads only those files.
"""
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

path = sys.argv[1]
spark = SparkSession.builder.master("local[2]").appName("perfpipe-top").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
t = time.perf_counter()
df = spark.read.option("basePath", path).parquet(path)
top = (
    df.select(F.element_at("stack", -1).getField("function").alias("leaf"), "period")
    .groupBy("leaf")
    .agg(F.sum("period").alias("weight"))
    .orderBy(F.desc("weight"))
    .limit(20)
    .collect()
)
rows = df.count()
hosts = df.select("host").distinct().count()
print(f"Spark local[2]: {rows} rows, {hosts} host(s), top leaf {top[0]['leaf']!r}, {time.perf_counter() - t:.1f} s")
spark.stop()

// The Flink baseline of the join benchmark: a Flink SQL interval join of the benchmark's
// feature-log topic (Flink's protobuf format) with its impression topic (JSON) into zstd
// Parquet partitioned dt/hr, in one local JVM (a MiniCluster), so that its CPU and memory are
// one process's, as join-bench measures the joiner's. The sources are bounded at the topics'
// end offsets at start-up: the job ends after the final checkpoint has committed every row.
package featurelog.bench;

import java.util.HashMap;
import java.util.Map;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;

public final class FlinkJoin {
  private FlinkJoin() {}

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
    }
    String kafka = need(args, "kafka");
    String featuresTopic = need(args, "features-topic");
    String eventsTopic = need(args, "events-topic");
    String out = need(args, "output");
    String checkpoints = need(args, "checkpoints");
    long waitMs = Long.parseLong(args.getOrDefault("features-wait-ms", "10000"));
    int features = Integer.parseInt(args.getOrDefault("features", "10"));
    int parallelism = Integer.parseInt(args.getOrDefault("parallelism", "2"));
    String group = args.getOrDefault("group", "bench-flink-" + ProcessHandle.current().pid());
    // Watermark alignment, as the joiner's `join.max-read-ahead` (30 s by default): a source
    // more than this ahead of the other in event time pauses. 0: none.
    long maxDriftMs = Long.parseLong(args.getOrDefault("max-drift-ms", "30000"));

    Map<String, String> conf = new HashMap<>();
    conf.put("execution.checkpointing.interval", "10 s");
    conf.put("execution.checkpointing.mode", "EXACTLY_ONCE");
    // On disk, as the joiner's checkpoints are.
    conf.put("state.backend.type", "hashmap");
    conf.put("execution.checkpointing.dir", "file://" + checkpoints);
    conf.put("table.local-time-zone", "UTC");
    StreamExecutionEnvironment env =
        StreamExecutionEnvironment.createLocalEnvironment(parallelism, Configuration.fromMap(conf));
    StreamTableEnvironment tables = StreamTableEnvironment.create(env);
    tables.getConfig().set("table.local-time-zone", "UTC");

    String kafkaSource =
        "'connector' = 'kafka', 'properties.bootstrap.servers' = '" + kafka + "',"
            + " 'properties.group.id' = '" + group + "',"
            + " 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',"
            + (maxDriftMs > 0
                ? " 'scan.watermark.alignment.group' = 'inputs',"
                    + " 'scan.watermark.alignment.max-drift' = '" + maxDriftMs + " ms',"
                    + " 'scan.watermark.alignment.update-interval' = '1 s',"
                : "");
    // Only the fields the rows need are declared; the format still parses whole messages.
    tables.executeSql(
        "CREATE TABLE feature_logs ("
            + " request_id STRING, model_name STRING, model_version STRING,"
            + " served_at ROW<seconds BIGINT, nanos INT>,"
            + " candidate_int_ids ARRAY<BIGINT>,"
            + " features ARRAY<ROW<name STRING, `values` ROW<fp32_values ARRAY<FLOAT>>>>,"
            + " served_ts AS TO_TIMESTAMP_LTZ(served_at.seconds * 1000 + served_at.nanos / 1000000, 3),"
            + " WATERMARK FOR served_ts AS served_ts - INTERVAL '1' SECOND"
            + ") WITH (" + kafkaSource + " 'topic' = '" + featuresTopic + "',"
            + " 'format' = 'protobuf', 'protobuf.message-class-name' = 'featurelog.v1.FeatureLog')");
    tables.executeSql(
        "CREATE TABLE events ("
            + " request_id STRING, item_id STRING, event_time BIGINT, event_type STRING,"
            + " event_ts AS TO_TIMESTAMP_LTZ(event_time, 3),"
            + " WATERMARK FOR event_ts AS event_ts - INTERVAL '1' SECOND"
            + ") WITH (" + kafkaSource + " 'topic' = '" + eventsTopic + "', 'format' = 'json')");
    StringBuilder columns = new StringBuilder();
    StringBuilder values = new StringBuilder();
    for (int f = 0; f < features; f++) {
      columns.append(", f").append(f).append(" FLOAT");
      // Features by position: the benchmark's logs list f0.. in order (the joiner goes by name).
      values.append(", features[").append(f + 1).append("].`values`.fp32_values[pos] AS f").append(f);
    }
    tables.executeSql(
        "CREATE TABLE training_rows ("
            + " request_id STRING, item_id STRING, model_name STRING, model_version STRING,"
            + " served_at TIMESTAMP_LTZ(6), impression_time TIMESTAMP_LTZ(6), impressed BOOLEAN,"
            + " clicks INT, conversions INT" + columns + ", dt STRING, hr STRING"
            + ") PARTITIONED BY (dt, hr) WITH ('connector' = 'filesystem', 'path' = 'file://" + out + "',"
            + " 'format' = 'parquet', 'parquet.compression' = 'ZSTD',"
            + " 'parquet.write.int64.timestamp' = 'true', 'parquet.timestamp.time.unit' = 'micros')");
    // The interval join: an impression joins the log of its request served at most
    // features-wait before it, as the joiner's `join.features-wait` (the benchmark's impressions
    // all come after their request).
    TableResult result =
        tables.executeSql(
            "INSERT INTO training_rows SELECT request_id, item_id, model_name, model_version,"
                + " CAST(served_ts AS TIMESTAMP_LTZ(6)), CAST(event_ts AS TIMESTAMP_LTZ(6)), TRUE, 0, 0"
                + values + ", DATE_FORMAT(event_ts, 'yyyy-MM-dd'), DATE_FORMAT(event_ts, 'HH') FROM ("
                + " SELECT e.request_id, e.item_id, e.event_ts, f.model_name, f.model_version,"
                + " f.served_ts, f.features,"
                + " ARRAY_POSITION(f.candidate_int_ids, CAST(e.item_id AS BIGINT)) AS pos"
                + " FROM events e, feature_logs f"
                + " WHERE e.event_type = 'impression' AND e.request_id = f.request_id"
                + " AND e.event_ts >= f.served_ts"
                + " AND e.event_ts < f.served_ts + " + interval(waitMs)
                + ") WHERE pos > 0");
    result.await();
    System.out.println("flink join done");
    System.exit(0);
  }

  /** `ms` as a day-time interval literal, exact to the millisecond. */
  private static String interval(long ms) {
    return String.format(
        "INTERVAL '%d %02d:%02d:%02d.%03d' DAY TO SECOND(3)",
        ms / 86_400_000, ms / 3_600_000 % 24, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
  }

  private static String need(Map<String, String> args, String key) {
    String v = args.get(key);
    if (v == null) {
      throw new IllegalArgumentException("missing --" + key);
    }
    return v;
  }
}

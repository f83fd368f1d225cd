package sdp.peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichFlatMapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.connector.jdbc.JdbcConnectionOptions;
import org.apache.flink.connector.jdbc.JdbcExecutionOptions;
import org.apache.flink.connector.jdbc.core.datastream.sink.JdbcSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.streaming.api.CheckpointingMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;

/**
 * The Flink peer of bench/peers.sh: a DataStream job on a local MiniCluster
 * (one JVM, parallelism 1): a KafkaSource, the enrich of examples/flights.sql
 * in Java (flight_phase, squawk_alert, the zone of the zones table, read
 * again every second), and Flink's JDBC sink (batches of 1,000 rows or 100
 * ms), INSERT for append and INSERT ... ON CONFLICT for upsert.
 *
 * At least once, as Flink's JDBC sink is without XA: checkpoints every 5 s
 * (the sink flushes its batch at each), the source's offsets committed to
 * Kafka when a checkpoint completes; a job started again (its checkpoints
 * die with the MiniCluster) starts from the committed offsets.
 *
 *   java -cp ... sdp.peers.FlinkPeer BOOTSTRAP TOPIC JDBC_URL TABLE append|upsert GROUP
 */
public final class FlinkPeer {
    static final String[] COLUMNS = {"seq", "icao24", "callsign", "lat", "lon", "baro_alt", "vert_rate", "squawk",
        "velocity", "heading", "poller_ts", "flight_phase", "squawk_alert", "zone"};

    /** An enriched position (a Flink POJO). */
    public static final class Position {
        public Long seq;
        public String icao24, callsign, squawk, flightPhase, squawkAlert, zone;
        public Double lat, lon, baroAlt, vertRate, velocity, heading;
        public Timestamp pollerTs;

        public Position() {}
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: FlinkPeer BOOTSTRAP TOPIC JDBC_URL TABLE append|upsert GROUP");
            System.exit(2);
        }
        String bootstrap = args[0], topic = args[1], url = args[2], table = args[3], mode = args[4], group = args[5];
        String sql = "INSERT INTO " + table + " (" + String.join(", ", COLUMNS) + ") VALUES ("
            + "?, ".repeat(COLUMNS.length - 1) + "?)";
        if (mode.equals("upsert")) {
            StringBuilder set = new StringBuilder();
            for (String c : COLUMNS)
                if (!c.equals("icao24"))
                    set.append(c).append(" = excluded.").append(c).append(", ");
            sql += " ON CONFLICT (icao24) DO UPDATE SET " + set + "updated_at = now()";
        }

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(1);
        env.enableCheckpointing(5000, CheckpointingMode.AT_LEAST_ONCE);
        KafkaSource<String> source = KafkaSource.<String>builder()
            .setBootstrapServers(bootstrap)
            .setTopics(topic)
            .setGroupId(group)
            .setStartingOffsets(OffsetsInitializer.committedOffsets(OffsetResetStrategy.EARLIEST))
            .setValueOnlyDeserializer(new SimpleStringSchema())
            .setProperty("fetch.max.wait.ms", "100")
            .setProperty("commit.offsets.on.checkpoint", "true")
            .build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "positions")
            .flatMap(new Enrich(url))
            .sinkTo(JdbcSink.<Position>builder()
                .withQueryStatement(sql, (ps, p) -> {
                    ps.setObject(1, p.seq, Types.BIGINT);
                    ps.setString(2, p.icao24);
                    ps.setString(3, p.callsign);
                    ps.setObject(4, p.lat, Types.DOUBLE);
                    ps.setObject(5, p.lon, Types.DOUBLE);
                    ps.setObject(6, p.baroAlt, Types.DOUBLE);
                    ps.setObject(7, p.vertRate, Types.DOUBLE);
                    ps.setString(8, p.squawk);
                    ps.setObject(9, p.velocity, Types.DOUBLE);
                    ps.setObject(10, p.heading, Types.DOUBLE);
                    ps.setTimestamp(11, p.pollerTs);
                    ps.setString(12, p.flightPhase);
                    ps.setString(13, p.squawkAlert);
                    ps.setString(14, p.zone);
                })
                .withExecutionOptions(JdbcExecutionOptions.builder()
                    .withBatchSize(1000).withBatchIntervalMs(100).withMaxRetries(3).build())
                .buildAtLeastOnce(new JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
                    .withUrl(url).withDriverName("org.postgresql.Driver").build()))
            .name("postgres");
        env.execute("peers " + group);
    }

    /** JSON to an enriched Position; not a position: skipped. */
    static final class Enrich extends RichFlatMapFunction<String, Position> {
        final String url;
        transient ObjectMapper json;
        transient Connection db;
        transient List<Object[]> zones;
        transient long zonesAt;

        Enrich(String url) {
            this.url = url;
        }

        @Override
        public void open(OpenContext context) throws Exception {
            json = new ObjectMapper();
            db = DriverManager.getConnection(url);
            zones = new ArrayList<>();
        }

        @Override
        public void close() throws Exception {
            if (db != null)
                db.close();
        }

        static Double number(JsonNode doc, String field) {
            JsonNode n = doc.get(field);
            return n == null || n.isNull() ? null : n.asDouble();
        }

        static String text(JsonNode doc, String field) {
            JsonNode n = doc.get(field);
            return n == null || n.isNull() ? null : n.asText();
        }

        @Override
        public void flatMap(String value, Collector<Position> out) throws Exception {
            if (System.nanoTime() - zonesAt >= 1_000_000_000L) {
                List<Object[]> z = new ArrayList<>();
                try (ResultSet rs = db.createStatement().executeQuery(
                        "SELECT zone, min_lat, max_lat, min_lon, max_lon FROM zones ORDER BY zone")) {
                    while (rs.next())
                        z.add(new Object[] {rs.getString(1), rs.getDouble(2), rs.getDouble(3), rs.getDouble(4), rs.getDouble(5)});
                }
                zones = z;
                zonesAt = System.nanoTime();
            }
            JsonNode doc;
            try {
                doc = json.readTree(value);
            } catch (Exception e) {
                return;
            }
            if (doc == null || !doc.isObject())
                return;
            Position p = new Position();
            p.icao24 = text(doc, "icao24");
            p.lat = number(doc, "lat");
            if (p.icao24 == null || p.lat == null)
                return;
            JsonNode seq = doc.get("seq");
            p.seq = seq == null || seq.isNull() ? null : seq.asLong();
            p.callsign = text(doc, "callsign");
            p.lon = number(doc, "lon");
            p.baroAlt = number(doc, "baro_alt");
            p.vertRate = number(doc, "vert_rate");
            p.squawk = text(doc, "squawk");
            p.velocity = number(doc, "velocity");
            p.heading = number(doc, "heading");
            String ts = text(doc, "poller_ts");
            p.pollerTs = ts == null ? null : Timestamp.from(OffsetDateTime.parse(ts).toInstant());
            p.flightPhase = p.vertRate != null && p.vertRate > 500 ? "climbing"
                : p.vertRate != null && p.vertRate < -500 ? "descending"
                : p.baroAlt != null && p.baroAlt > 30000 ? "cruise" : "en_route";
            p.squawkAlert = "7500".equals(p.squawk) || "7600".equals(p.squawk) || "7700".equals(p.squawk) ? "emergency" : null;
            if (p.lon != null)
                for (Object[] z : zones)
                    if (p.lat >= (Double) z[1] && p.lat <= (Double) z[2] && p.lon >= (Double) z[3] && p.lon <= (Double) z[4]) {
                        p.zone = (String) z[0];
                        break;
                    }
            out.collect(p);
        }
    }
}

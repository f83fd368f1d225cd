package sdp.peers;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;

/**
 * The Kafka Streams peer of bench/peers.sh: the enrich of examples/flights.sql
 * (flight_phase, squawk_alert, the zone of the zones table, read again every
 * second) on each position, written to PostgreSQL through JDBC batches
 * (pgjdbc, reWriteBatchedInserts), INSERT for append and INSERT ... ON
 * CONFLICT for upsert.
 *
 * At least once, the way Kafka Streams allows it with an outside database:
 * the batches of every task of the stream thread are executed and committed
 * in PostgreSQL, then a task asks Kafka Streams to commit the offsets
 * (ProcessorContext.commit, which commits every task of the thread: so all
 * of them write first); the automatic commit is off (commit.interval.ms at
 * its largest), so offsets are never committed ahead of the rows.  A crash
 * between the two writes the rows of those batches again.  Kafka Streams' exactly_once_v2 covers Kafka outputs
 * only, not a database.  A batch is written at 1,000 rows or every 100 ms.
 *
 *   java -cp ... sdp.peers.StreamsPeer BOOTSTRAP TOPIC JDBC_URL TABLE append|upsert APP_ID STATE_DIR
 */
public final class StreamsPeer {
    static final String[] COLUMNS = {"seq", "icao24", "callsign", "lat", "lon", "baro_alt", "vert_rate", "squawk",
        "velocity", "heading", "poller_ts", "flight_phase", "squawk_alert", "zone"};

    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: StreamsPeer BOOTSTRAP TOPIC JDBC_URL TABLE append|upsert APP_ID STATE_DIR");
            System.exit(2);
        }
        String bootstrap = args[0], topic = args[1], url = args[2], table = args[3], mode = args[4];
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[5]);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[6]);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.MAX_VALUE);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), 100);

        String cols = String.join(", ", COLUMNS);
        String sql = "INSERT INTO " + table + " (" + cols + ") VALUES (" + "?, ".repeat(COLUMNS.length - 1) + "?)";
        if (mode.equals("upsert")) {
            StringBuilder set = new StringBuilder();
            for (String c : COLUMNS)
                if (!c.equals("icao24"))
                    set.append(c).append(" = excluded.").append(c).append(", ");
            sql += " ON CONFLICT (icao24) DO UPDATE SET " + set + "updated_at = now()";
        }
        final String statement = sql;

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(topic, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
            .process(() -> new Writer(url, statement));
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            done.countDown();
        }));
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        done.await();
    }

    /** One per task (partition): its own connection and batch. */
    static final class Writer implements Processor<byte[], byte[], Void, Void> {
        static final ObjectMapper JSON = new ObjectMapper();
        /** The writers of the (one) stream thread: a commit covers them all. */
        static final List<Writer> ALL = new ArrayList<>();
        final String url, statement;
        ProcessorContext<Void, Void> context;
        Connection db;
        PreparedStatement insert;
        List<Object[]> zones = new ArrayList<>();
        long zonesAt = 0;
        int pending = 0;

        Writer(String url, String statement) {
            this.url = url;
            this.statement = statement;
        }

        @Override
        public void init(ProcessorContext<Void, Void> context) {
            this.context = context;
            try {
                db = DriverManager.getConnection(url);
                db.setAutoCommit(false);
                insert = db.prepareStatement(statement);
            } catch (SQLException e) {
                throw new RuntimeException(e);
            }
            context.schedule(Duration.ofMillis(100), PunctuationType.WALL_CLOCK_TIME, t -> write());
            ALL.add(this);
        }

        void readZones() throws SQLException {
            List<Object[]> z = new ArrayList<>();
            try (ResultSet rs = db.createStatement().executeQuery(
                    "SELECT zone, min_lat, max_lat, min_lon, max_lon FROM zones ORDER BY zone")) {
                while (rs.next())
                    z.add(new Object[] {rs.getString(1), rs.getDouble(2), rs.getDouble(3), rs.getDouble(4), rs.getDouble(5)});
            }
            db.commit();
            zones = z;
            zonesAt = System.nanoTime();
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
        public void process(Record<byte[], byte[]> record) {
            try {
                if (System.nanoTime() - zonesAt >= 1_000_000_000L)
                    readZones();
                JsonNode doc;
                try {
                    doc = JSON.readTree(record.value());
                } catch (Exception e) {
                    return; // not JSON: skipped
                }
                if (doc == null || !doc.isObject())
                    return;
                String icao24 = text(doc, "icao24");
                Double lat = number(doc, "lat"), lon = number(doc, "lon");
                if (icao24 == null || lat == null)
                    return;
                Double baroAlt = number(doc, "baro_alt"), vertRate = number(doc, "vert_rate");
                String squawk = text(doc, "squawk");
                String phase = vertRate != null && vertRate > 500 ? "climbing"
                    : vertRate != null && vertRate < -500 ? "descending"
                    : baroAlt != null && baroAlt > 30000 ? "cruise" : "en_route";
                String alert = "7500".equals(squawk) || "7600".equals(squawk) || "7700".equals(squawk) ? "emergency" : null;
                String zone = null;
                if (lon != null)
                    for (Object[] z : zones)
                        if (lat >= (Double) z[1] && lat <= (Double) z[2] && lon >= (Double) z[3] && lon <= (Double) z[4]) {
                            zone = (String) z[0];
                            break;
                        }
                JsonNode seq = doc.get("seq");
                if (seq == null || seq.isNull()) insert.setNull(1, Types.BIGINT); else insert.setLong(1, seq.asLong());
                insert.setString(2, icao24);
                insert.setString(3, text(doc, "callsign"));
                insert.setObject(4, lat, Types.DOUBLE);
                insert.setObject(5, lon, Types.DOUBLE);
                insert.setObject(6, baroAlt, Types.DOUBLE);
                insert.setObject(7, vertRate, Types.DOUBLE);
                insert.setString(8, squawk);
                insert.setObject(9, number(doc, "velocity"), Types.DOUBLE);
                insert.setObject(10, number(doc, "heading"), Types.DOUBLE);
                String ts = text(doc, "poller_ts");
                insert.setObject(11, ts == null ? null : OffsetDateTime.parse(ts), Types.TIMESTAMP_WITH_TIMEZONE);
                insert.setString(12, phase);
                insert.setString(13, alert);
                insert.setString(14, zone);
                insert.addBatch();
                if (++pending >= 1000)
                    write();
            } catch (SQLException e) {
                throw new RuntimeException(e);
            }
        }

        /** Every task's batch into PostgreSQL, committed; then the offsets, asked of Kafka Streams. */
        void write() {
            if (pending == 0)
                return;
            for (Writer w : ALL)
                w.executeBatch();
            context.commit();
        }

        void executeBatch() {
            if (pending == 0)
                return;
            try {
                insert.executeBatch();
                db.commit();
            } catch (SQLException e) {
                throw new RuntimeException(e);
            }
            pending = 0;
        }

        @Override
        public void close() {
            executeBatch();
            ALL.remove(this);
            try {
                db.close();
            } catch (SQLException e) {
                // closing anyway
            }
        }
    }
}

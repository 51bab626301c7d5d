// KafkaCheck: a small command-line driver for the Apache Kafka Java client, used by
// tests/test_java_client.py to check that kafkube works with an unmodified Java client.
//
// Every subcommand prints exactly one JSON object on one line to stdout and exits 0 on
// success, 1 on failure (the JSON then has "ok": false and an "error"), 2 on bad usage.
// Client logging goes to stderr (slf4j-simple, level "warn" unless
// -Dorg.slf4j.simpleLogger.defaultLogLevel=... is given).
//
// Records are generated and checked with one shared scheme, so a consumer can verify
// what a producer wrote:
//   key(i)       = <key-prefix> + i                       (prefix default "k-"; or null keys)
//   value(i, n)  = "v-" + i, padded to n characters with ('a' + (i + j) % 26) at position j
//   header       = "h" -> decimal i                      (with --with-headers)
//   timestamp(i) = base + i * step                        (--timestamp, --timestamp-step)
//
// Usage:
//   produce <bootstrap> <topic> <count> [--compression none|gzip|snappy|lz4|zstd]
//       [--acks all|1|0|-1] [--idempotence true|false] [--value-size N] [--with-headers]
//       [--key-prefix K] [--null-keys] [--partition P] [--timestamp MS] [--timestamp-step MS]
//       [--max-request-size BYTES] [--first-index I] [--timeout-ms T] [--max-print N]
//       [--prop k=v]...
//     Writes records I .. I+count-1 (I = --first-index, default 0) and stops at the first
//     failed send; "offsets" lists [partition, offset, timestamp] per record when
//     count <= --max-print (default 100).
//   consume <bootstrap> <topic> <expected-count> [--timeout-ms T] [--value-size N]
//       [--with-headers] [--key-prefix K] [--null-keys] [--timestamp MS] [--timestamp-step MS]
//       [--max-print N] [--group G] [--from-offset O] [--first-index I] [--prop k=v]...
//     Expects records I .. I+expected-1 (I = --first-index, default 0), each exactly once.
//     Without --group: assign() every partition and read from the beginning (or seek() every
//     partition to --from-offset). With --group:
//     subscribe() in group G (auto.offset.reset=earliest), commitSync() at the end and
//     report the committed offsets.
//   offsets-for-times <bootstrap> <topic> <timestamp> [<timestamp>...] [--timeout-ms T]
//       [--prop k=v]...
//   admin <bootstrap> create <topic>... [--partitions N] [--replication-factor R]
//       [--config k=v]...                                  (topic configs, e.g. max.message.bytes)
//   admin <bootstrap> delete <topic>...
//   admin <bootstrap> describe <topic>...
//   admin <bootstrap> list [--internal]
//   admin <bootstrap> create-partitions <topic> <total>     (createPartitions, increaseTo)
//   admin <bootstrap> configs <topic>...                    (describeConfigs)
//   admin <bootstrap> cluster                               (describeCluster)
//   version                                                 (prints the kafka-clients version)
//
// Every command takes --timeout-ms T (default 30000: the client's api/blocking timeouts and
// the consumer's overall deadline) and --prop k=v to set any client config last.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReferenceArray;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

public final class KafkaCheck {

    private static final int DEFAULT_TIMEOUT_MS = 30_000;
    private static final int DEFAULT_MAX_PRINT = 100;
    private static final int PRINT_VALUE_CHARS = 200;
    private static final Set<String> FLAGS =
            new HashSet<>(Arrays.asList("--with-headers", "--null-keys", "--internal"));

    private KafkaCheck() {
    }

    /** Bad command line: exit code 2. */
    static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    // ------------------------------------------------------------------ entry point

    public static void main(String[] argv) {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        String command = argv.length > 0 ? argv[0] : "";
        Map<String, Object> out;
        int code;
        try {
            Args args = Args.parse(Arrays.copyOfRange(argv, Math.min(1, argv.length), argv.length));
            switch (command) {
                case "produce":
                    out = produce(args);
                    break;
                case "consume":
                    out = consume(args);
                    break;
                case "offsets-for-times":
                    out = offsetsForTimes(args);
                    break;
                case "admin":
                    out = admin(args);
                    break;
                case "version":
                    out = new LinkedHashMap<>();
                    out.put("ok", true);
                    break;
                default:
                    throw new UsageException("unknown command '" + command
                            + "'; expected produce, consume, offsets-for-times, admin or version");
            }
            code = Boolean.TRUE.equals(out.get("ok")) ? 0 : 1;
        } catch (UsageException e) {
            out = failure(command, e);
            code = 2;
        } catch (Throwable e) {
            out = failure(command, e);
            code = 1;
        }
        out.put("client_version", AppInfoParser.getVersion());
        System.out.println(Json.write(out));
        System.out.flush();
        if (code != 0) {
            Object error = out.get("error");
            System.err.println("KafkaCheck " + command + " failed: "
                    + (error != null ? error : "see the JSON result on stdout"));
        }
        System.exit(code);
    }

    private static Map<String, Object> failure(String command, Throwable e) {
        Throwable cause = unwrap(e);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("ok", false);
        out.put("command", command);
        out.put("exception", cause.getClass().getName());
        out.put("error", cause.getClass().getSimpleName() + ": " + cause.getMessage());
        return out;
    }

    private static Throwable unwrap(Throwable e) {
        Throwable t = e;
        while ((t instanceof ExecutionException || t instanceof java.util.concurrent.CompletionException)
                && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    // ------------------------------------------------------------------ record scheme

    static String key(String prefix, long i) {
        return prefix + i;
    }

    static String value(long i, int size) {
        StringBuilder sb = new StringBuilder(Math.max(size, 24));
        sb.append("v-").append(i);
        for (int j = sb.length(); j < size; j++) {
            sb.append((char) ('a' + (int) ((i + j) % 26)));
        }
        return sb.toString();
    }

    /** The record index encoded at the start of a value ("v-<i>..."), or -1. */
    static long indexOf(String value) {
        if (value == null || !value.startsWith("v-")) {
            return -1;
        }
        int end = 2;
        while (end < value.length() && Character.isDigit(value.charAt(end))) {
            end++;
        }
        if (end == 2 || end - 2 > 18) {
            return -1;
        }
        return Long.parseLong(value.substring(2, end));
    }

    // ------------------------------------------------------------------ produce

    static Map<String, Object> produce(Args a) throws Exception {
        a.positionals(3, "produce <bootstrap> <topic> <count> [options]");
        String bootstrap = a.pos(0);
        String topic = a.pos(1);
        int count = a.posInt(2);
        int timeoutMs = a.intOpt("--timeout-ms", DEFAULT_TIMEOUT_MS);
        int valueSize = a.intOpt("--value-size", 0);
        boolean withHeaders = a.flag("--with-headers");
        boolean nullKeys = a.flag("--null-keys");
        String keyPrefix = a.opt("--key-prefix", "k-");
        Integer partition = a.has("--partition") ? a.intOpt("--partition", 0) : null;
        long base = a.longOpt("--timestamp", System.currentTimeMillis());
        long step = a.longOpt("--timestamp-step", 1);
        long firstIndex = a.longOpt("--first-index", 0);
        int maxPrint = a.intOpt("--max-print", DEFAULT_MAX_PRINT);
        String acks = a.opt("--acks", null);

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "kafkacheck-producer");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(Math.min(30_000, timeoutMs)));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs + 1_000));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, a.opt("--compression", "none"));
        if (acks != null) {
            p.put(ProducerConfig.ACKS_CONFIG, acks);
        }
        if (a.has("--idempotence")) {
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, a.opt("--idempotence", "true"));
        }
        if (a.has("--max-request-size")) {
            p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, a.opt("--max-request-size", null));
        }
        a.applyProps(p);

        // Filled in by the producer's I/O thread (or by send() itself).
        AtomicReferenceArray<RecordMetadata> acked = new AtomicReferenceArray<>(count);
        AtomicReferenceArray<Exception> failed = new AtomicReferenceArray<>(count);
        AtomicBoolean anyFailed = new AtomicBoolean();
        int sent = 0;
        long[] producerId = null;
        long started = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                long idx = firstIndex + i;
                byte[] k = nullKeys ? null : key(keyPrefix, idx).getBytes(StandardCharsets.UTF_8);
                byte[] v = value(idx, valueSize).getBytes(StandardCharsets.UTF_8);
                RecordHeaders headers = new RecordHeaders();
                if (withHeaders) {
                    headers.add("h", String.valueOf(idx).getBytes(StandardCharsets.UTF_8));
                }
                ProducerRecord<byte[], byte[]> record =
                        new ProducerRecord<>(topic, partition, base + idx * step, k, v, headers);
                final int index = i;
                sent++;
                try {
                    producer.send(record, (md, ex) -> {
                        if (ex != null) {
                            failed.set(index, ex);
                            anyFailed.set(true);
                        } else {
                            acked.set(index, md);
                        }
                    });
                } catch (Exception e) {
                    failed.set(index, e);
                    anyFailed.set(true);
                }
                // Stop at the first failure: after e.g. a metadata timeout every further
                // send() would block for max.block.ms again.
                if (anyFailed.get()) {
                    break;
                }
            }
            producer.flush();
            producerId = producerIdAndEpoch(producer);
            producer.close(Duration.ofMillis(timeoutMs));
        }
        long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);

        int nAcked = 0;
        int nFailed = 0;
        Map<String, Integer> errors = new TreeMap<>();
        String firstError = null;
        Map<Integer, Map<String, Object>> partitions = new TreeMap<>();
        Map<Integer, Long> lastOffset = new HashMap<>();
        boolean inOrder = true;
        List<Object> offsets = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            RecordMetadata md = acked.get(i);
            if (md == null) {
                if (failed.get(i) != null) {
                    nFailed++;
                    Throwable t = unwrap(failed.get(i));
                    errors.merge(t.getClass().getSimpleName(), 1, Integer::sum);
                    if (firstError == null) {
                        firstError = t.getClass().getSimpleName() + ": " + t.getMessage();
                    }
                }
                if (count <= maxPrint) {
                    offsets.add(null);
                }
                continue;
            }
            nAcked++;
            Map<String, Object> ps = partitions.computeIfAbsent(md.partition(), x -> {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("count", 0);
                m.put("first_offset", md.offset());
                m.put("last_offset", md.offset());
                return m;
            });
            ps.put("count", (Integer) ps.get("count") + 1);
            ps.put("first_offset", Math.min((Long) ps.get("first_offset"), md.offset()));
            ps.put("last_offset", Math.max((Long) ps.get("last_offset"), md.offset()));
            Long prev = lastOffset.put(md.partition(), md.offset());
            if (prev != null && md.hasOffset() && md.offset() <= prev) {
                inOrder = false;
            }
            if (count <= maxPrint) {
                offsets.add(Arrays.asList(md.partition(), md.offset(), md.timestamp()));
            }
        }
        for (Map<String, Object> ps : partitions.values()) {
            long first = (Long) ps.get("first_offset");
            long last = (Long) ps.get("last_offset");
            ps.put("contiguous", first >= 0 && last - first + 1 == (Integer) ps.get("count"));
        }

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("ok", nAcked == count);
        out.put("topic", topic);
        out.put("requested", count);
        out.put("sent", sent);
        out.put("acked", nAcked);
        out.put("failed", nFailed);
        out.put("not_sent", count - sent);
        out.put("errors", errors);
        if (firstError != null) {
            out.put("error", firstError);
        }
        out.put("first_offset", count > 0 && acked.get(0) != null ? acked.get(0).offset() : null);
        out.put("last_offset",
                count > 0 && acked.get(count - 1) != null ? acked.get(count - 1).offset() : null);
        out.put("in_order", inOrder);
        out.put("partitions", partitions);
        if (count <= maxPrint) {
            out.put("offsets", offsets);
        }
        out.put("producer_id", producerId == null ? null : producerId[0]);
        out.put("producer_epoch", producerId == null ? null : producerId[1]);
        out.put("base_timestamp", base);
        out.put("elapsed_ms", elapsedMs);
        return out;
    }

    /**
     * The producer id and epoch the producer got from InitProducerId, or null when it has none
     * (idempotence off). kafka-clients has no public API for this, so it is read from the
     * producer's TransactionManager by reflection (checked against the pinned kafka-clients).
     */
    private static long[] producerIdAndEpoch(KafkaProducer<?, ?> producer) throws Exception {
        java.lang.reflect.Field field = KafkaProducer.class.getDeclaredField("transactionManager");
        field.setAccessible(true);
        Object tm = field.get(producer);
        if (tm == null) {
            return null;
        }
        java.lang.reflect.Method method = tm.getClass().getDeclaredMethod("producerIdAndEpoch");
        method.setAccessible(true);
        org.apache.kafka.common.utils.ProducerIdAndEpoch pe =
                (org.apache.kafka.common.utils.ProducerIdAndEpoch) method.invoke(tm);
        return pe == null ? null : new long[] {pe.producerId, pe.epoch};
    }

    // ------------------------------------------------------------------ consume

    static Map<String, Object> consume(Args a) throws Exception {
        a.positionals(3, "consume <bootstrap> <topic> <expected-count> [options]");
        String bootstrap = a.pos(0);
        String topic = a.pos(1);
        long expected = a.posLong(2);
        int timeoutMs = a.intOpt("--timeout-ms", DEFAULT_TIMEOUT_MS);
        int valueSize = a.intOpt("--value-size", 0);
        boolean withHeaders = a.flag("--with-headers");
        boolean nullKeys = a.flag("--null-keys");
        String keyPrefix = a.opt("--key-prefix", "k-");
        Long base = a.has("--timestamp") ? a.longOpt("--timestamp", 0) : null;
        long step = a.longOpt("--timestamp-step", 1);
        int maxPrint = a.intOpt("--max-print", DEFAULT_MAX_PRINT);
        long deadline = System.currentTimeMillis() + timeoutMs;

        Properties p = consumerProps(bootstrap, timeoutMs);
        String group = a.opt("--group", null);
        long firstIndex = a.longOpt("--first-index", 0);
        Long fromOffset = a.has("--from-offset") ? a.longOpt("--from-offset", 0) : null;
        if (group != null && fromOffset != null) {
            throw new UsageException("--from-offset and --group do not go together");
        }
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        }
        a.applyProps(p);

        List<Map<String, Object>> printed = new ArrayList<>();
        Map<Integer, Map<String, Object>> partitions = new TreeMap<>();
        Map<Integer, Long> prevOffset = new HashMap<>();
        Map<Integer, Long> prevIndex = new HashMap<>();
        Set<Long> seen = new HashSet<>();
        long count = 0;
        long duplicates = 0;
        long unparsable = 0;
        long valueMismatches = 0;
        long keyMismatches = 0;
        long headerMismatches = 0;
        long timestampMismatches = 0;
        boolean offsetsIncreasing = true;
        boolean offsetsContiguous = true;
        boolean keyOrder = true;
        Set<String> timestampTypes = new TreeSet<>();
        List<String> mismatchExamples = new ArrayList<>();
        boolean drained = false;
        Set<Integer> assignment = null;
        Map<String, Object> committed = null;
        Map<TopicPartition, Long> beginning;
        Map<TopicPartition, Long> end = null;

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = topicPartitions(consumer, topic, deadline);
            if (group == null) {
                consumer.assign(tps);
                if (fromOffset == null) {
                    consumer.seekToBeginning(tps);
                } else {
                    for (TopicPartition tp : tps) {
                        consumer.seek(tp, fromOffset);
                    }
                }
            } else {
                consumer.subscribe(Collections.singletonList(topic));
            }
            beginning = consumer.beginningOffsets(tps, remaining(deadline));
            while (System.currentTimeMillis() < deadline) {
                // In a group, positions are known once the group has handed this (only)
                // member every partition.
                if (count >= expected && consumer.assignment().size() == tps.size()) {
                    // All expected records are here: read on to the log end offsets as they
                    // are now, so that unexpected extra records (duplicates) are seen too.
                    if (end == null) {
                        end = consumer.endOffsets(tps, remaining(deadline));
                    }
                    boolean atEnd = true;
                    for (TopicPartition tp : tps) {
                        if (consumer.position(tp, remaining(deadline)) < end.get(tp)) {
                            atEnd = false;
                        }
                    }
                    if (atEnd) {
                        drained = true;
                        break;
                    }
                }
                long wait = Math.max(1, Math.min(500, deadline - System.currentTimeMillis()));
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(wait));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    count++;
                    String k = r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8);
                    String v = r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8);
                    long idx = indexOf(v);
                    int part = r.partition();

                    Map<String, Object> ps = partitions.computeIfAbsent(part, x -> {
                        Map<String, Object> m = new LinkedHashMap<>();
                        m.put("count", 0L);
                        m.put("first_offset", r.offset());
                        m.put("last_offset", r.offset());
                        return m;
                    });
                    ps.put("count", (Long) ps.get("count") + 1);
                    ps.put("last_offset", r.offset());
                    Long prev = prevOffset.put(part, r.offset());
                    if (prev != null) {
                        if (r.offset() <= prev) {
                            offsetsIncreasing = false;
                        }
                        if (r.offset() != prev + 1) {
                            offsetsContiguous = false;
                        }
                    }

                    timestampTypes.add(r.timestampType().name);
                    List<String> problems = new ArrayList<>();
                    if (idx < 0) {
                        unparsable++;
                        problems.add("value has no index");
                    } else {
                        if (!seen.add(idx)) {
                            duplicates++;
                        }
                        Long prevIdx = prevIndex.put(part, idx);
                        if (prevIdx != null && idx <= prevIdx) {
                            keyOrder = false;
                        }
                        if (!value(idx, valueSize).equals(v)) {
                            valueMismatches++;
                            problems.add("value");
                        }
                        String wantKey = nullKeys ? null : key(keyPrefix, idx);
                        if (wantKey == null ? k != null : !wantKey.equals(k)) {
                            keyMismatches++;
                            problems.add("key");
                        }
                        if (!headersMatch(r, withHeaders, idx)) {
                            headerMismatches++;
                            problems.add("headers");
                        }
                        if (base != null && r.timestamp() != base + idx * step) {
                            timestampMismatches++;
                            problems.add("timestamp");
                        }
                    }
                    if (!problems.isEmpty() && mismatchExamples.size() < 10) {
                        mismatchExamples.add("partition " + part + " offset " + r.offset() + ": "
                                + String.join(", ", problems));
                    }
                    if (printed.size() < maxPrint) {
                        printed.add(describeRecord(r, k, v));
                    }
                }
            }
            // The deadline may have passed (too few records): the closing calls get a budget
            // of their own so that the result still reports what was read.
            Duration closing = Duration.ofMillis(Math.min(10_000, timeoutMs));
            if (end == null) {
                end = consumer.endOffsets(tps, closing);
            }
            if (group != null) {
                assignment = new TreeSet<>();
                for (TopicPartition tp : consumer.assignment()) {
                    assignment.add(tp.partition());
                }
                if (!consumer.assignment().isEmpty()) {
                    consumer.commitSync(closing);
                }
                committed = new TreeMap<>();
                Map<TopicPartition, OffsetAndMetadata> offsets =
                        consumer.committed(new HashSet<>(tps), closing);
                for (TopicPartition tp : tps) {
                    OffsetAndMetadata om = offsets.get(tp);
                    committed.put(String.valueOf(tp.partition()), om == null ? null : om.offset());
                }
            }
        }

        long missing = 0;
        for (long i = firstIndex; i < firstIndex + expected; i++) {
            if (!seen.contains(i)) {
                missing++;
            }
        }
        for (Map.Entry<Integer, Map<String, Object>> e : partitions.entrySet()) {
            Map<String, Object> ps = e.getValue();
            long first = (Long) ps.get("first_offset");
            long last = (Long) ps.get("last_offset");
            ps.put("contiguous", last - first + 1 == (Long) ps.get("count"));
        }
        Map<String, Object> logOffsets = new TreeMap<>();
        for (Map.Entry<TopicPartition, Long> e : beginning.entrySet()) {
            logOffsets.put(String.valueOf(e.getKey().partition()),
                    Arrays.asList(e.getValue(), end.get(e.getKey())));
        }

        Map<String, Object> out = new LinkedHashMap<>();
        boolean clean = unparsable == 0 && duplicates == 0 && valueMismatches == 0
                && keyMismatches == 0 && headerMismatches == 0 && timestampMismatches == 0;
        out.put("ok", count == expected && missing == 0 && clean);
        out.put("topic", topic);
        out.put("expected", expected);
        out.put("count", count);
        out.put("timed_out", count < expected || !drained);
        out.put("drained", drained);
        out.put("missing", missing);
        out.put("duplicates", duplicates);
        out.put("unparsable", unparsable);
        out.put("value_mismatches", valueMismatches);
        out.put("key_mismatches", keyMismatches);
        out.put("header_mismatches", headerMismatches);
        out.put("timestamp_mismatches", timestampMismatches);
        out.put("mismatch_examples", mismatchExamples);
        out.put("offsets_increasing", offsetsIncreasing);
        out.put("offsets_contiguous", offsetsContiguous);
        out.put("key_order", keyOrder);
        out.put("timestamp_types", timestampTypes);
        out.put("partitions", partitions);
        out.put("log_offsets", logOffsets);
        if (group != null) {
            out.put("group", group);
            out.put("assignment", assignment);
            out.put("committed", committed);
        }
        out.put("records_printed", printed.size());
        out.put("records", printed);
        if (count != expected) {
            out.put("error", "received " + count + " of " + expected + " expected records");
        } else if (!clean || missing != 0) {
            out.put("error", "records do not match what was produced: missing " + missing
                    + ", duplicates " + duplicates + ", without index " + unparsable
                    + ", wrong value/key/headers/timestamp " + valueMismatches + "/" + keyMismatches
                    + "/" + headerMismatches + "/" + timestampMismatches
                    + (mismatchExamples.isEmpty() ? "" : "; " + String.join("; ", mismatchExamples)));
        }
        return out;
    }

    private static boolean headersMatch(ConsumerRecord<byte[], byte[]> r, boolean withHeaders,
            long idx) {
        Header[] all = r.headers().toArray();
        if (!withHeaders) {
            return all.length == 0;
        }
        return all.length == 1 && "h".equals(all[0].key()) && all[0].value() != null
                && String.valueOf(idx).equals(new String(all[0].value(), StandardCharsets.UTF_8));
    }

    private static Map<String, Object> describeRecord(ConsumerRecord<byte[], byte[]> r, String k,
            String v) throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("partition", r.partition());
        m.put("offset", r.offset());
        m.put("timestamp", r.timestamp());
        m.put("timestamp_type", r.timestampType().name);
        m.put("key", k);
        if (v != null && v.length() > PRINT_VALUE_CHARS) {
            m.put("value", v.substring(0, PRINT_VALUE_CHARS));
            m.put("value_truncated", true);
        } else {
            m.put("value", v);
        }
        m.put("value_len", r.value() == null ? -1 : r.value().length);
        m.put("value_sha256", r.value() == null ? null : sha256(r.value()));
        List<Object> headers = new ArrayList<>();
        for (Header h : r.headers()) {
            headers.add(Arrays.asList(h.key(),
                    h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8)));
        }
        m.put("headers", headers);
        m.put("leader_epoch", r.leaderEpoch().orElse(null));
        return m;
    }

    private static String sha256(byte[] data) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-256").digest(data);
        StringBuilder sb = new StringBuilder(d.length * 2);
        for (byte b : d) {
            sb.append(String.format("%02x", b & 0xff));
        }
        return sb.toString();
    }

    // ------------------------------------------------------------------ offsets-for-times

    static Map<String, Object> offsetsForTimes(Args a) throws Exception {
        a.positionals(3, "offsets-for-times <bootstrap> <topic> <timestamp> [<timestamp>...]");
        String bootstrap = a.pos(0);
        String topic = a.pos(1);
        List<Long> timestamps = new ArrayList<>();
        for (int i = 2; i < a.positionalCount(); i++) {
            timestamps.add(a.posLong(i));
        }
        int timeoutMs = a.intOpt("--timeout-ms", DEFAULT_TIMEOUT_MS);
        long deadline = System.currentTimeMillis() + timeoutMs;
        Properties p = consumerProps(bootstrap, timeoutMs);
        a.applyProps(p);

        List<Object> lookups = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = topicPartitions(consumer, topic, deadline);
            for (long ts : timestamps) {
                Map<TopicPartition, Long> query = new HashMap<>();
                for (TopicPartition tp : tps) {
                    query.put(tp, ts);
                }
                Map<TopicPartition, OffsetAndTimestamp> result =
                        consumer.offsetsForTimes(query, remaining(deadline));
                Map<String, Object> partitions = new TreeMap<>();
                for (TopicPartition tp : tps) {
                    OffsetAndTimestamp ot = result.get(tp);
                    Map<String, Object> m = null;
                    if (ot != null) {
                        m = new LinkedHashMap<>();
                        m.put("offset", ot.offset());
                        m.put("timestamp", ot.timestamp());
                        m.put("leader_epoch", ot.leaderEpoch().orElse(null));
                    }
                    partitions.put(String.valueOf(tp.partition()), m);
                }
                Map<String, Object> lookup = new LinkedHashMap<>();
                lookup.put("timestamp", ts);
                lookup.put("partitions", partitions);
                lookups.add(lookup);
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("ok", true);
        out.put("topic", topic);
        // One lookup per timestamp, in the order given; each maps partition -> the earliest
        // offset whose timestamp is >= the one asked for, or null when there is none.
        out.put("lookups", lookups);
        return out;
    }

    // ------------------------------------------------------------------ admin

    static Map<String, Object> admin(Args a) throws Exception {
        a.positionals(2, "admin <bootstrap> create|delete|describe|list|create-partitions|configs"
                + "|cluster ...");
        String bootstrap = a.pos(0);
        String action = a.pos(1);
        List<String> names = a.positionalsFrom(2);
        int timeoutMs = a.intOpt("--timeout-ms", DEFAULT_TIMEOUT_MS);

        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kafkacheck-admin");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(Math.min(30_000, timeoutMs)));
        a.applyProps(p);

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("ok", true);
        out.put("action", action);
        try (Admin admin = Admin.create(p)) {
            switch (action) {
                case "create":
                    adminCreate(admin, a, names, timeoutMs, out);
                    break;
                case "delete":
                    requireNames(names, "admin <bootstrap> delete <topic>...");
                    admin.deleteTopics(names).all().get(timeoutMs, TimeUnit.MILLISECONDS);
                    out.put("deleted", names);
                    break;
                case "describe":
                    requireNames(names, "admin <bootstrap> describe <topic>...");
                    adminDescribe(admin, names, timeoutMs, out);
                    break;
                case "list": {
                    ListTopicsOptions options = new ListTopicsOptions().listInternal(a.flag("--internal"));
                    Set<String> topics = admin.listTopics(options).names()
                            .get(timeoutMs, TimeUnit.MILLISECONDS);
                    out.put("topics", new TreeSet<>(topics));
                    break;
                }
                case "create-partitions": {
                    if (names.size() != 2) {
                        throw new UsageException(
                                "usage: admin <bootstrap> create-partitions <topic> <total-count>");
                    }
                    int total = a.posInt(3);
                    admin.createPartitions(Collections.singletonMap(names.get(0),
                            NewPartitions.increaseTo(total)))
                            .all().get(timeoutMs, TimeUnit.MILLISECONDS);
                    out.put("topic", names.get(0));
                    out.put("partitions", total);
                    break;
                }
                case "configs":
                    requireNames(names, "admin <bootstrap> configs <topic>...");
                    adminConfigs(admin, names, timeoutMs, out);
                    break;
                case "cluster": {
                    DescribeClusterResult cluster = admin.describeCluster();
                    out.put("cluster_id", cluster.clusterId().get(timeoutMs, TimeUnit.MILLISECONDS));
                    Node controller = cluster.controller().get(timeoutMs, TimeUnit.MILLISECONDS);
                    out.put("controller", controller == null ? null : controller.id());
                    List<Object> nodes = new ArrayList<>();
                    for (Node n : cluster.nodes().get(timeoutMs, TimeUnit.MILLISECONDS)) {
                        nodes.add(node(n));
                    }
                    out.put("nodes", nodes);
                    break;
                }
                default:
                    throw new UsageException("unknown admin action '" + action + "'; expected"
                            + " create, delete, describe, list, create-partitions, configs or cluster");
            }
            admin.close(Duration.ofMillis(Math.min(5_000, timeoutMs)));
        }
        return out;
    }

    private static void requireNames(List<String> names, String usage) {
        if (names.isEmpty()) {
            throw new UsageException("usage: " + usage);
        }
    }

    private static void adminCreate(Admin admin, Args a, List<String> names, int timeoutMs,
            Map<String, Object> out) throws Exception {
        requireNames(names, "admin <bootstrap> create <topic>... [--partitions N]"
                + " [--replication-factor R] [--config k=v]...");
        int partitions = a.intOpt("--partitions", 1);
        short rf = (short) a.intOpt("--replication-factor", 1);
        Map<String, String> configs = a.keyValues("--config");
        List<NewTopic> topics = new ArrayList<>();
        for (String name : names) {
            topics.add(new NewTopic(name, partitions, rf).configs(configs));
        }
        CreateTopicsResult result = admin.createTopics(topics);
        result.all().get(timeoutMs, TimeUnit.MILLISECONDS);
        Map<String, Object> created = new TreeMap<>();
        for (String name : names) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("topic_id", String.valueOf(result.topicId(name).get()));
            m.put("num_partitions", result.numPartitions(name).get());
            m.put("replication_factor", result.replicationFactor(name).get());
            // The configs in the response (CreateTopics v5+) are informational only.
            try {
                Config config = result.config(name).get();
                Map<String, Object> returned = new TreeMap<>();
                for (String k : configs.keySet()) {
                    ConfigEntry e = config.get(k);
                    returned.put(k, e == null ? null : e.value());
                }
                m.put("configs", returned);
            } catch (ExecutionException e) {
                m.put("configs_error", String.valueOf(unwrap(e)));
            }
            created.put(name, m);
        }
        out.put("created", created);
    }

    private static void adminDescribe(Admin admin, List<String> names, int timeoutMs,
            Map<String, Object> out) throws Exception {
        Map<String, TopicDescription> descriptions = admin.describeTopics(names)
                .allTopicNames().get(timeoutMs, TimeUnit.MILLISECONDS);
        Map<String, Object> topics = new TreeMap<>();
        for (TopicDescription d : descriptions.values()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", d.name());
            m.put("internal", d.isInternal());
            m.put("topic_id", String.valueOf(d.topicId()));
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo tpi : d.partitions()) {
                Map<String, Object> pm = new LinkedHashMap<>();
                pm.put("partition", tpi.partition());
                pm.put("leader", tpi.leader() == null ? null : tpi.leader().id());
                pm.put("replicas", nodeIds(tpi.replicas()));
                pm.put("isr", nodeIds(tpi.isr()));
                parts.add(pm);
            }
            m.put("partitions", parts);
            topics.put(d.name(), m);
        }
        out.put("topics", topics);
    }

    private static void adminConfigs(Admin admin, List<String> names, int timeoutMs,
            Map<String, Object> out) throws Exception {
        List<ConfigResource> resources = new ArrayList<>();
        for (String name : names) {
            resources.add(new ConfigResource(ConfigResource.Type.TOPIC, name));
        }
        Map<ConfigResource, Config> configs = admin.describeConfigs(resources).all()
                .get(timeoutMs, TimeUnit.MILLISECONDS);
        Map<String, Object> topics = new TreeMap<>();
        for (Map.Entry<ConfigResource, Config> e : configs.entrySet()) {
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry c : e.getValue().entries()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("value", c.value());
                m.put("source", c.source() == null ? null : c.source().name());
                m.put("read_only", c.isReadOnly());
                m.put("sensitive", c.isSensitive());
                entries.put(c.name(), m);
            }
            topics.put(e.getKey().name(), entries);
        }
        out.put("configs", topics);
    }

    private static Map<String, Object> node(Node n) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", n.id());
        m.put("host", n.host());
        m.put("port", n.port());
        m.put("rack", n.rack());
        return m;
    }

    private static List<Integer> nodeIds(Collection<Node> nodes) {
        List<Integer> ids = new ArrayList<>();
        for (Node n : nodes) {
            ids.add(n.id());
        }
        return ids;
    }

    // ------------------------------------------------------------------ consumer helpers

    private static Properties consumerProps(String bootstrap, int timeoutMs) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "kafkacheck-consumer");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(timeoutMs));
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(Math.min(30_000, timeoutMs)));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        return p;
    }

    /** The topic's partitions, sorted; the topic must exist. */
    private static List<TopicPartition> topicPartitions(KafkaConsumer<?, ?> consumer, String topic,
            long deadline) {
        List<PartitionInfo> infos = consumer.partitionsFor(topic, remaining(deadline));
        if (infos == null || infos.isEmpty()) {
            throw new org.apache.kafka.common.errors.UnknownTopicOrPartitionException(
                    "partitionsFor(" + topic + ") returned no partitions");
        }
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo info : infos) {
            tps.add(new TopicPartition(topic, info.partition()));
        }
        tps.sort((x, y) -> Integer.compare(x.partition(), y.partition()));
        return tps;
    }

    private static Duration remaining(long deadline) {
        return Duration.ofMillis(Math.max(1, deadline - System.currentTimeMillis()));
    }

    // ------------------------------------------------------------------ arguments

    static final class Args {
        private final List<String> positionals = new ArrayList<>();
        private final Map<String, List<String>> options = new HashMap<>();
        private final Set<String> flags = new HashSet<>();

        static Args parse(String[] argv) {
            Args a = new Args();
            for (int i = 0; i < argv.length; i++) {
                String s = argv[i];
                if (s.startsWith("--") && s.length() > 2) {
                    int eq = s.indexOf('=');
                    String name = eq > 0 ? s.substring(0, eq) : s;
                    if (FLAGS.contains(name)) {
                        if (eq > 0) {
                            throw new UsageException(name + " takes no value");
                        }
                        a.flags.add(name);
                        continue;
                    }
                    String val;
                    if (eq > 0) {
                        val = s.substring(eq + 1);
                    } else if (i + 1 < argv.length) {
                        val = argv[++i];
                    } else {
                        throw new UsageException(name + " needs a value");
                    }
                    a.options.computeIfAbsent(name, x -> new ArrayList<>()).add(val);
                } else {
                    a.positionals.add(s);
                }
            }
            return a;
        }

        void positionals(int n, String usage) {
            if (positionals.size() < n) {
                throw new UsageException("usage: " + usage);
            }
        }

        int positionalCount() {
            return positionals.size();
        }

        String pos(int i) {
            return positionals.get(i);
        }

        int posInt(int i) {
            return (int) parseLong("argument " + (i + 1), positionals.get(i));
        }

        long posLong(int i) {
            return parseLong("argument " + (i + 1), positionals.get(i));
        }

        List<String> positionalsFrom(int i) {
            return new ArrayList<>(positionals.subList(Math.min(i, positionals.size()),
                    positionals.size()));
        }

        boolean has(String name) {
            return options.containsKey(name);
        }

        boolean flag(String name) {
            return flags.contains(name);
        }

        String opt(String name, String dflt) {
            List<String> v = options.get(name);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        int intOpt(String name, int dflt) {
            String v = opt(name, null);
            return v == null ? dflt : (int) parseLong(name, v);
        }

        long longOpt(String name, long dflt) {
            String v = opt(name, null);
            return v == null ? dflt : parseLong(name, v);
        }

        Map<String, String> keyValues(String name) {
            Map<String, String> m = new LinkedHashMap<>();
            for (String kv : options.getOrDefault(name, Collections.emptyList())) {
                int eq = kv.indexOf('=');
                if (eq <= 0) {
                    throw new UsageException(name + " expects key=value, got '" + kv + "'");
                }
                m.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
            return m;
        }

        /** Raw client configs given with --prop k=v override everything set before. */
        void applyProps(Properties p) {
            p.putAll(keyValues("--prop"));
        }

        private static long parseLong(String what, String s) {
            try {
                return Long.parseLong(s);
            } catch (NumberFormatException e) {
                throw new UsageException(what + ": not an integer: '" + s + "'");
            }
        }
    }

    // ------------------------------------------------------------------ JSON output

    static final class Json {
        private Json() {
        }

        static String write(Object o) {
            StringBuilder sb = new StringBuilder();
            write(sb, o);
            return sb.toString();
        }

        private static void write(StringBuilder sb, Object o) {
            if (o == null) {
                sb.append("null");
            } else if (o instanceof String) {
                quote(sb, (String) o);
            } else if (o instanceof Boolean || o instanceof Integer || o instanceof Long
                    || o instanceof Short || o instanceof Byte) {
                sb.append(o);
            } else if (o instanceof Double || o instanceof Float) {
                double d = ((Number) o).doubleValue();
                sb.append(Double.isFinite(d) ? String.valueOf(d) : "null");
            } else if (o instanceof Map) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    quote(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    write(sb, e.getValue());
                }
                sb.append('}');
            } else if (o instanceof Iterable) {
                sb.append('[');
                boolean first = true;
                for (Object e : (Iterable<?>) o) {
                    if (!first) {
                        sb.append(',');
                    }
                    first = false;
                    write(sb, e);
                }
                sb.append(']');
            } else {
                quote(sb, String.valueOf(o));
            }
        }

        /** A JSON string literal; everything outside printable ASCII is \\u-escaped. */
        private static void quote(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"':
                        sb.append("\\\"");
                        break;
                    case '\\':
                        sb.append("\\\\");
                        break;
                    case '\n':
                        sb.append("\\n");
                        break;
                    case '\r':
                        sb.append("\\r");
                        break;
                    case '\t':
                        sb.append("\\t");
                        break;
                    case '\b':
                        sb.append("\\b");
                        break;
                    case '\f':
                        sb.append("\\f");
                        break;
                    default:
                        if (c < 0x20 || c > 0x7e) {
                            sb.append(String.format("\\u%04x", (int) c));
                        } else {
                            sb.append(c);
                        }
                }
            }
            sb.append('"');
        }
    }
}

// TxnCheck: command-line drivers of Kafka transactions with the Apache Kafka Java client, for the
// transaction tests (tests/txn_programs.py runs them; tests/clients/java-txn/setup.sh builds them).
//
// Every mode prints exactly one JSON object on one line to stdout when it ends and exits 0 on
// success, 1 on failure (the JSON then has "ok": false and an "error"), 2 on bad usage.
// Diagnostics and client logging go to stderr (slf4j-simple, level "warn" unless
// -Dorg.slf4j.simpleLogger.defaultLogLevel=... is given). Every run is bounded in time: besides
// the mode's own --timeout-s, a watchdog prints the JSON (ok false) and ends the JVM if the mode
// has not finished 2 * client timeout + 30 s after its deadline. On SIGTERM the mode stops at
// its next step and prints its JSON (ok false, "interrupted": true; WordCount: see there).
//
// Modes (every option takes a value unless marked as a flag):
//
//   copy --bootstrap B --input T1 --output T2 --group G --transactional-id ID --expected N
//        --timeout-s S [--commit-every K=100] [--client-timeout-ms 15000]
//        [--transaction-timeout-ms 30000] [--group-protocol classic|consumer] [--assign]
//     A transactional consume-transform-produce loop: a read_committed KafkaConsumer without
//     auto-commit (subscribe() to T1 in group G, or assign() every partition with --assign) and
//     a transactional KafkaProducer (acks=all, idempotence). One transaction per poll of at
//     most K records: beginTransaction, send each record to T2 (same key, value + ":copied",
//     same partition number), sendOffsetsToTransaction(positions, consumer.groupMetadata()),
//     commitTransaction. Errors, as the KafkaProducer documentation prescribes:
//       - fatal (ProducerFencedException, InvalidProducerEpochException,
//         OutOfOrderSequenceException, UnsupportedVersionException, AuthorizationException,
//         anything else once abortTransaction fails too): close the producer and the consumer,
//         create new ones (initTransactions fences the old epoch) and go on;
//       - TimeoutException from commitTransaction: retry the commit (up to 5 times), then treat
//         the commit as unknown ("commits_uncertain") and recreate the clients;
//       - any other KafkaException (abortable): abortTransaction and seek the consumer back to
//         the group's committed offsets.
//     Done when the input's read_committed end offsets add up to at least N (N = the number of
//     input records, written without transactions) and the group's committed offset of every
//     input partition has reached its end offset. Fails at the deadline (S seconds).
//     JSON: transactions_committed, transactions_aborted, producer_recreations,
//     consumer_recreations, records_copied (records in committed transactions), commit_retries,
//     commits_uncertain, offsets_only_commits, transaction_ms_avg and transaction_ms_max
//     (beginTransaction to the end of commitTransaction, committed ones), errors (exception
//     class -> count), committed_offsets, end_offsets, elapsed_ms.
//
//   produce --bootstrap B --topic T --transactional-id ID --transactions N --per-transaction K
//        [--abort-every M=0] [--first-transaction F=0] [--leave-open] [--timeout-s 60]
//        [--transaction-timeout-ms 60000]
//     Transactions t = F .. F+N-1; the i-th (i = 1..N) is aborted when M > 0 and i % M == 0.
//     Record j (0..K-1) of transaction t: key "k-t-j", value "committed-t-j" or "aborted-t-j"
//     (the aborted ones are flushed to the brokers before abortTransaction). --leave-open: then
//     begin one more transaction (t = F+N) of K records "open-t-j", flush it and end the JVM
//     without committing or aborting it (a hanging transaction, until transaction.timeout.ms).
//     JSON: transactions_committed, transactions_aborted, records_committed, records_aborted,
//     records_open, elapsed_ms.
//
//   bench --bootstrap B --topic T --transactional-id ID --records N --per-transaction K
//        [--record-size 1024] [--timeout-s 300] [--producer-prop KEY=VALUE ...]
//     The timed transactional producer of `python -m bench transactions` (bench/transactions.py
//     gives the settings with --producer-prop; acks=all and idempotence are always on): N values
//     of random bytes, no key, sent to partition i % P (P the topic's partitions) in
//     transactions of K. Untimed: the topic's metadata and initTransactions. Timed from the
//     first send to the return of the last commitTransaction; the commit latency is how long
//     each commitTransaction takes (it flushes what is still queued, then ends the transaction).
//     JSON: records (acknowledged), failed, partitions, transactions, seconds,
//     init_transactions_ms, commit_ms (each commit's latency, in order), client_cpu (the JVM's
//     CPU seconds over the timed part), transaction_v2 (the producer's own
//     TransactionManager.isTransactionV2Enabled() after the last commit, read by reflection:
//     whether it spoke transaction.version 2; null if unreadable).
//
//   read --bootstrap B --topic T --isolation read_committed|read_uncommitted [--timeout-s 60]
//     Reads the whole topic: assign() every partition, seekToBeginning, poll until every
//     position has reached endOffsets() (taken once at the start; for read_committed that is
//     the last stable offset). JSON: count, prefixes (value up to its first '-' -> count; null
//     values count as "<null>"), duplicates (count - distinct values), duplicated (up to 20 of
//     them), partitions (partition -> records read), end_offsets, and either values (sorted,
//     when count < 1000) or values_sha1 = sha1 of the sorted values joined by "\n" (UTF-8;
//     sorted by Java's String order, which is code-point order for BMP text).
//
//   fence --bootstrap B --topic T --transactional-id ID [--timeout-s 60]
//     Producer 1 (ID): initTransactions, beginTransaction, send "fence-older-1" and wait for its
//     ack. Producer 2 (same ID): initTransactions. Then producer 1's commitTransaction must fail
//     with ProducerFencedException or InvalidProducerEpochException (possibly as the cause of
//     a KafkaException), and producer 2 must commit a transaction with "fence-newer-1".
//     JSON: older_exception, older_exception_chain, older_committed, newer_committed.
//
// WordCount.java (the Kafka Streams word count) shares this file's helpers.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnCheck {

    static final int DEFAULT_CLIENT_TIMEOUT_MS = 15_000;
    static final int MAX_PRINTED_VALUES = 1000;
    static final int COMMIT_ATTEMPTS = 5;
    static final String COPY_SUFFIX = ":copied";

    private TxnCheck() {
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
        Runner.run("TxnCheck", argv, (command, args) -> {
            switch (command) {
                case "copy":
                    return copy(args);
                case "produce":
                    return produce(args);
                case "read":
                    return read(args);
                case "fence":
                    return fence(args);
                case "bench":
                    return bench(args);
                default:
                    throw new UsageException("unknown mode '" + command
                            + "'; expected copy, produce, read, fence or bench");
            }
        });
    }

    /** One mode of a program: the JSON result ("ok" decides the exit code). */
    interface Mode {
        Map<String, Object> run(String command, Args args) throws Exception;
    }

    /**
     * The common frame of TxnCheck and WordCount: argument parsing, the one JSON line, the exit
     * code, SIGTERM and the watchdog. A mode publishes a snapshot of its partial results
     * (printed if it is interrupted or hangs) and its hard deadline.
     */
    static final class Runner {
        static final AtomicBoolean STOP = new AtomicBoolean();
        private static final AtomicBoolean EMITTED = new AtomicBoolean();
        private static volatile int emittedCode = 1;
        private static volatile Supplier<Map<String, Object>> snapshot = LinkedHashMap::new;
        private static volatile String command = "";
        private static volatile boolean stopIsSuccess;
        private static final long HOOK_GRACE_MS = 25_000;

        private Runner() {
        }

        /** What to print if the mode is interrupted or hangs. */
        static void snapshot(Supplier<Map<String, Object>> s) {
            snapshot = s;
        }

        /** SIGTERM is the normal way to end this mode (WordCount run): print ok as computed. */
        static void stopIsSuccess() {
            stopIsSuccess = true;
        }

        static boolean stopped() {
            return STOP.get();
        }

        /** Arms the watchdog: the JVM ends by itself at {@code hardDeadline} (epoch ms). */
        static void watchdog(long hardDeadline) {
            Thread t = new Thread(() -> {
                while (true) {
                    long left = hardDeadline - System.currentTimeMillis();
                    if (left <= 0) {
                        break;
                    }
                    try {
                        Thread.sleep(Math.min(left, 1000));
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                Map<String, Object> out = partial();
                out.put("ok", false);
                out.put("error", "still running at the watchdog's deadline (hung in a client call)");
                if (emit(out, 1)) {
                    log("watchdog: hung; halting");
                    Runtime.getRuntime().halt(1);
                }
            }, "txncheck-watchdog");
            t.setDaemon(true);
            t.start();
        }

        static void run(String program, String[] argv, Mode mode) {
            if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
                System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
            }
            command = argv.length > 0 ? argv[0] : "";
            Runtime.getRuntime().addShutdownHook(new Thread(Runner::onShutdown, "txncheck-stop"));
            Map<String, Object> out;
            int code;
            try {
                Args args = Args.parse(Arrays.copyOfRange(argv, Math.min(1, argv.length),
                        argv.length));
                out = mode.run(command, args);
                code = Boolean.TRUE.equals(out.get("ok")) ? 0 : 1;
            } catch (UsageException e) {
                out = failure(e);
                code = 2;
            } catch (Throwable e) {
                log("failed: " + e);
                e.printStackTrace();
                out = partial();
                out.putAll(failure(e));
                code = 1;
            }
            if (emit(out, code) && code != 0) {
                Object error = out.get("error");
                System.err.println(program + " " + command + " failed: "
                        + (error != null ? error : "see the JSON result on stdout"));
            }
            System.exit(EMITTED.get() ? emittedCode : code);
        }

        /** Prints the result unless one was printed already; true if this call printed it. */
        static boolean emit(Map<String, Object> out, int code) {
            if (!EMITTED.compareAndSet(false, true)) {
                return false;
            }
            Map<String, Object> full = new LinkedHashMap<>();
            full.put("ok", code == 0 && Boolean.TRUE.equals(out.get("ok")));
            full.put("mode", command);
            full.putAll(out);
            full.put("ok", code == 0 && Boolean.TRUE.equals(out.get("ok")));
            full.put("client_version", clientVersion());
            emittedCode = Boolean.TRUE.equals(full.get("ok")) ? 0 : (code == 0 ? 1 : code);
            System.out.println(Json.write(full));
            System.out.flush();
            return true;
        }

        private static Map<String, Object> partial() {
            Map<String, Object> out = new LinkedHashMap<>();
            try {
                out.putAll(snapshot.get());
            } catch (RuntimeException e) {
                out.put("snapshot_error", e.toString());
            }
            return out;
        }

        /** SIGTERM (or System.exit): let the mode finish and print, else print a snapshot. */
        private static void onShutdown() {
            if (EMITTED.get()) {
                return; // the normal end: main printed and called System.exit
            }
            log("stop requested (SIGTERM); finishing");
            STOP.set(true);
            long until = System.currentTimeMillis() + HOOK_GRACE_MS;
            while (!EMITTED.get() && System.currentTimeMillis() < until) {
                try {
                    Thread.sleep(50);
                } catch (InterruptedException e) {
                    break;
                }
            }
            if (!EMITTED.get()) {
                Map<String, Object> out = partial();
                out.put("ok", stopIsSuccess && !Boolean.FALSE.equals(out.get("ok")));
                out.put("interrupted", true);
                if (!Boolean.TRUE.equals(out.get("ok"))) {
                    out.putIfAbsent("error", "interrupted (SIGTERM) before the end");
                }
                emit(out, Boolean.TRUE.equals(out.get("ok")) ? 0 : 1);
            }
            Runtime.getRuntime().halt(emittedCode);
        }

        private static Map<String, Object> failure(Throwable e) {
            Throwable cause = unwrap(e);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("ok", false);
            out.put("exception", cause.getClass().getName());
            out.put("error", cause.getClass().getSimpleName() + ": " + cause.getMessage());
            return out;
        }
    }

    /**
     * The kafka-clients version on the classpath, from its kafka/kafka-version.properties (the
     * file AppInfoParser reads; that class moved to an internal package in 4.4).
     */
    static String clientVersion() {
        try (java.io.InputStream in = KafkaProducer.class.getResourceAsStream(
                "/kafka/kafka-version.properties")) {
            Properties p = new Properties();
            if (in != null) {
                p.load(in);
            }
            return p.getProperty("version", "unknown");
        } catch (java.io.IOException e) {
            return "unknown";
        }
    }

    static Throwable unwrap(Throwable e) {
        Throwable t = e;
        while ((t instanceof ExecutionException || t instanceof java.util.concurrent.CompletionException)
                && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    static void log(String message) {
        System.err.printf("[%tT.%<tL] %s%n", System.currentTimeMillis(), message);
        System.err.flush();
    }

    static Duration remaining(long deadline) {
        return Duration.ofMillis(Math.max(1, deadline - System.currentTimeMillis()));
    }

    static long elapsed(long start) {
        return System.currentTimeMillis() - start;
    }

    // ------------------------------------------------------------------ client configs

    static Properties consumerProps(String bootstrap, int clientTimeoutMs, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(clientTimeoutMs));
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(Math.min(10_000, clientTimeoutMs)));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // A missing topic is an error here, not something to create.
        p.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        return p;
    }

    static Properties producerProps(String bootstrap, String transactionalId, int clientTimeoutMs,
            int transactionTimeoutMs) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(clientTimeoutMs));
        int requestTimeout = Math.min(10_000, clientTimeoutMs);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(requestTimeout));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG,
                String.valueOf(Math.max(2 * clientTimeoutMs, requestTimeout + 1000)));
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(transactionTimeoutMs));
        return p;
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    /** The topic's partitions, sorted; the topic must exist. */
    static List<TopicPartition> topicPartitions(KafkaConsumer<?, ?> consumer, String topic,
            long deadline) {
        while (true) {
            List<PartitionInfo> infos = consumer.partitionsFor(topic, remaining(deadline));
            if (infos != null && !infos.isEmpty()) {
                List<TopicPartition> tps = new ArrayList<>();
                for (PartitionInfo info : infos) {
                    tps.add(new TopicPartition(topic, info.partition()));
                }
                tps.sort((x, y) -> Integer.compare(x.partition(), y.partition()));
                return tps;
            }
            if (System.currentTimeMillis() >= deadline) {
                throw new org.apache.kafka.common.errors.UnknownTopicOrPartitionException(
                        "partitionsFor(" + topic + ") returned no partitions");
            }
            sleep(200);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static Map<String, Object> byPartition(Map<TopicPartition, Long> m) {
        Map<String, Object> out = new TreeMap<>((x, y) -> Integer.compare(Integer.parseInt(x),
                Integer.parseInt(y)));
        for (Map.Entry<TopicPartition, Long> e : m.entrySet()) {
            out.put(String.valueOf(e.getKey().partition()), e.getValue());
        }
        return out;
    }

    // ------------------------------------------------------------------ copy

    /** The consume-transform-produce loop and its counters (read by the snapshot too). */
    static final class CopyLoop {
        final String bootstrap;
        final String input;
        final String output;
        final String group;
        final String transactionalId;
        final long expected;
        final int commitEvery;
        final int clientTimeoutMs;
        final int transactionTimeoutMs;
        final String groupProtocol;
        final boolean assign;
        final long start = System.currentTimeMillis();
        final long deadline;

        final AtomicLong committed = new AtomicLong();
        final AtomicLong aborted = new AtomicLong();
        final AtomicLong producerRecreations = new AtomicLong();
        final AtomicLong consumerRecreations = new AtomicLong();
        final AtomicLong recordsCopied = new AtomicLong();
        final AtomicLong commitRetries = new AtomicLong();
        final AtomicLong commitsUncertain = new AtomicLong();
        final AtomicLong offsetsOnlyCommits = new AtomicLong();
        final AtomicLong commitMsTotal = new AtomicLong();
        final AtomicLong commitMsMax = new AtomicLong();
        final Map<String, Long> errors = Collections.synchronizedMap(new TreeMap<>());
        volatile Map<TopicPartition, Long> lastCommitted = Collections.emptyMap();
        volatile Map<TopicPartition, Long> lastEnd = Collections.emptyMap();

        private KafkaProducer<byte[], byte[]> producer;
        private boolean producerReady;
        private int producersCreated;
        private KafkaConsumer<byte[], byte[]> consumer;
        private int consumersCreated;
        private long nextCheck;

        CopyLoop(Args a) {
            a.check("--bootstrap", "--input", "--output", "--group", "--transactional-id",
                    "--expected", "--timeout-s", "--commit-every", "--client-timeout-ms",
                    "--transaction-timeout-ms", "--group-protocol", "--assign");
            bootstrap = a.req("--bootstrap");
            input = a.req("--input");
            output = a.req("--output");
            group = a.req("--group");
            transactionalId = a.req("--transactional-id");
            expected = a.longOpt("--expected", -1);
            if (expected < 0) {
                throw new UsageException("--expected N is required");
            }
            long timeoutS = a.longOpt("--timeout-s", -1);
            if (timeoutS <= 0) {
                throw new UsageException("--timeout-s S (> 0) is required");
            }
            commitEvery = a.intOpt("--commit-every", 100);
            if (commitEvery <= 0) {
                throw new UsageException("--commit-every must be > 0");
            }
            clientTimeoutMs = a.intOpt("--client-timeout-ms", DEFAULT_CLIENT_TIMEOUT_MS);
            transactionTimeoutMs = a.intOpt("--transaction-timeout-ms", 30_000);
            groupProtocol = a.opt("--group-protocol", "classic");
            assign = a.flag("--assign");
            deadline = start + timeoutS * 1000;
        }

        Map<String, Object> result() {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("transactions_committed", committed.get());
            out.put("transactions_aborted", aborted.get());
            out.put("producer_recreations", producerRecreations.get());
            out.put("consumer_recreations", consumerRecreations.get());
            out.put("records_copied", recordsCopied.get());
            out.put("commit_retries", commitRetries.get());
            out.put("commits_uncertain", commitsUncertain.get());
            out.put("offsets_only_commits", offsetsOnlyCommits.get());
            long n = committed.get();
            out.put("transaction_ms_avg", n == 0 ? 0 : commitMsTotal.get() / n);
            out.put("transaction_ms_max", commitMsMax.get());
            synchronized (errors) {
                out.put("errors", new TreeMap<>(errors));
            }
            out.put("committed_offsets", byPartition(lastCommitted));
            out.put("end_offsets", byPartition(lastEnd));
            out.put("expected", expected);
            out.put("elapsed_ms", elapsed(start));
            return out;
        }

        private void countError(Throwable e, String where) {
            String name = e.getClass().getSimpleName();
            errors.merge(name, 1L, Long::sum);
            Throwable cause = e.getCause();
            log("copy: " + where + ": " + e + (cause != null && cause != e ? " (cause: " + cause + ")" : ""));
        }

        Map<String, Object> run() {
            boolean done = false;
            String error = null;
            while (!done) {
                if (Runner.stopped()) {
                    error = "interrupted (SIGTERM) before the end";
                    break;
                }
                if (System.currentTimeMillis() >= deadline) {
                    error = "timeout: not done after " + elapsed(start) + " ms";
                    break;
                }
                try {
                    done = step();
                } catch (KafkaException | IllegalStateException e) {
                    // Outside a transaction: consumer or initTransactions trouble.
                    countError(e, "outside a transaction");
                    if (producer != null && !producerReady && e instanceof TimeoutException) {
                        continue; // initTransactions may be retried after a timeout
                    }
                    recreate();
                    sleep(200);
                }
            }
            closeAll();
            Map<String, Object> out = result();
            out.put("ok", done);
            if (!done) {
                out.put("error", error);
            }
            if (Runner.stopped()) {
                out.put("interrupted", true);
            }
            return out;
        }

        private void ensureClients() {
            if (consumer == null) {
                if (consumersCreated++ > 0) {
                    consumerRecreations.incrementAndGet();
                }
                Properties p = consumerProps(bootstrap, clientTimeoutMs, "read_committed");
                p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
                p.put(ConsumerConfig.CLIENT_ID_CONFIG, "txncheck-copy-consumer");
                p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(commitEvery));
                p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, groupProtocol);
                if ("classic".equals(groupProtocol)) {
                    p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
                    p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
                }
                consumer = new KafkaConsumer<>(p);
                if (assign) {
                    consumer.assign(topicPartitions(consumer, input, deadline));
                } else {
                    consumer.subscribe(Collections.singletonList(input));
                }
            }
            if (producer == null) {
                if (producersCreated++ > 0) {
                    producerRecreations.incrementAndGet();
                }
                Properties p = producerProps(bootstrap, transactionalId, clientTimeoutMs,
                        transactionTimeoutMs);
                p.put(ProducerConfig.CLIENT_ID_CONFIG, "txncheck-copy-producer");
                producer = new KafkaProducer<>(p);
                producerReady = false;
            }
            if (!producerReady) {
                producer.initTransactions();
                producerReady = true;
            }
        }

        /** One poll and its transaction; true once done. */
        private boolean step() {
            ensureClients();
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
            if (records.isEmpty()) {
                return checkDone();
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            for (TopicPartition tp : records.partitions()) {
                offsets.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            }
            int n = records.count();
            long began = System.currentTimeMillis();
            try {
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    byte[] value = r.value() == null ? null : utf8(str(r.value()) + COPY_SUFFIX);
                    producer.send(new ProducerRecord<>(output, r.partition(), r.key(), value));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
            } catch (KafkaException | IllegalStateException e) {
                countError(e, "in a transaction");
                abortOrRecreate(e);
                return false;
            }
            commit(n, began);
            return false;
        }

        /** commitTransaction, retried on timeouts; counts the transaction begun at {@code began}. */
        private void commit(int n, long began) {
            for (int attempt = 1; ; attempt++) {
                try {
                    producer.commitTransaction();
                    committed.incrementAndGet();
                    recordsCopied.addAndGet(n);
                    long ms = System.currentTimeMillis() - began;
                    commitMsTotal.addAndGet(ms);
                    commitMsMax.accumulateAndGet(ms, Math::max);
                    return;
                } catch (TimeoutException e) {
                    countError(e, "commitTransaction (attempt " + attempt + ")");
                    if (attempt < COMMIT_ATTEMPTS && System.currentTimeMillis() < deadline
                            && !Runner.stopped()) {
                        commitRetries.incrementAndGet();
                        continue;
                    }
                    // The commit may or may not have happened; only closing is allowed now.
                    commitsUncertain.incrementAndGet();
                    recreate();
                    return;
                } catch (KafkaException | IllegalStateException e) {
                    countError(e, "commitTransaction");
                    abortOrRecreate(e);
                    return;
                }
            }
        }

        private static boolean fatal(Throwable e) {
            for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
                if (t instanceof ProducerFencedException || t instanceof InvalidProducerEpochException
                        || t instanceof OutOfOrderSequenceException
                        || t instanceof UnsupportedVersionException
                        || t instanceof AuthorizationException
                        || t instanceof IllegalStateException) {
                    return true;
                }
            }
            return false;
        }

        /** Abortable: abort and rewind; fatal, or the abort fails too: new clients. */
        private void abortOrRecreate(RuntimeException e) {
            if (fatal(e)) {
                log("copy: fatal for this producer: recreating the producer and the consumer");
                recreate();
                return;
            }
            for (int attempt = 1; ; attempt++) {
                try {
                    producer.abortTransaction();
                    aborted.incrementAndGet();
                    break;
                } catch (TimeoutException te) {
                    countError(te, "abortTransaction (attempt " + attempt + ")");
                    if (attempt >= COMMIT_ATTEMPTS || System.currentTimeMillis() >= deadline) {
                        recreate();
                        return;
                    }
                } catch (KafkaException | IllegalStateException e2) {
                    countError(e2, "abortTransaction");
                    recreate();
                    return;
                }
            }
            rewind();
        }

        /** Seek every assigned partition back to the group's committed offset. */
        private void rewind() {
            try {
                Set<TopicPartition> assigned = consumer.assignment();
                Map<TopicPartition, OffsetAndMetadata> com = consumer.committed(assigned);
                List<TopicPartition> noOffset = new ArrayList<>();
                for (TopicPartition tp : assigned) {
                    OffsetAndMetadata o = com.get(tp);
                    if (o == null) {
                        noOffset.add(tp);
                    } else {
                        consumer.seek(tp, o);
                    }
                }
                if (!noOffset.isEmpty()) {
                    consumer.seekToBeginning(noOffset); // auto.offset.reset=earliest
                }
            } catch (KafkaException | IllegalStateException e) {
                countError(e, "rewinding the consumer");
                closeConsumer();
            }
        }

        /** Done once the group's committed offsets reach the input's end offsets (and sum >= N). */
        private boolean checkDone() {
            long now = System.currentTimeMillis();
            if (now < nextCheck) {
                return false;
            }
            nextCheck = now + 500;
            List<TopicPartition> tps;
            Map<TopicPartition, Long> end;
            Map<TopicPartition, OffsetAndMetadata> com;
            try {
                tps = topicPartitions(consumer, input, deadline);
                end = consumer.endOffsets(tps);
                com = consumer.committed(new HashSet<>(tps));
            } catch (TimeoutException e) {
                countError(e, "reading the end and committed offsets");
                return false; // asked again at the next empty poll
            }
            lastEnd = new HashMap<>(end);
            long endSum = 0;
            for (long v : end.values()) {
                endSum += v;
            }
            Map<TopicPartition, Long> comOffsets = new HashMap<>();
            boolean all = true;
            Map<TopicPartition, OffsetAndMetadata> behind = new HashMap<>();
            Set<TopicPartition> assigned = consumer.assignment();
            for (TopicPartition tp : tps) {
                OffsetAndMetadata o = com.get(tp);
                long c = o == null ? 0 : o.offset();
                comOffsets.put(tp, c);
                long e = end.getOrDefault(tp, 0L);
                if (c < e) {
                    all = false;
                    // Consumed to the end (past control records) but not committed: commit the
                    // position alone in a transaction.
                    long pos = assigned.contains(tp) ? position(tp) : -1;
                    if (pos >= e) {
                        behind.put(tp, new OffsetAndMetadata(pos));
                    }
                }
            }
            lastCommitted = comOffsets;
            if (!all && !behind.isEmpty()) {
                long began = System.currentTimeMillis();
                try {
                    producer.beginTransaction();
                    producer.sendOffsetsToTransaction(behind, consumer.groupMetadata());
                } catch (KafkaException | IllegalStateException e) {
                    countError(e, "offsets-only transaction");
                    abortOrRecreate(e);
                    return false;
                }
                long before = committed.get();
                commit(0, began);
                if (committed.get() > before) {
                    offsetsOnlyCommits.incrementAndGet();
                }
            }
            return all && endSum >= expected;
        }

        /** The consumer's position, or -1 if it cannot be had within the client timeout. */
        private long position(TopicPartition tp) {
            try {
                return consumer.position(tp);
            } catch (TimeoutException e) {
                countError(e, "position(" + tp + ")");
                return -1;
            }
        }

        private void recreate() {
            closeAll();
        }

        private void closeProducer() {
            if (producer != null) {
                try {
                    producer.close(Duration.ZERO);
                } catch (RuntimeException e) {
                    log("copy: closing the producer: " + e);
                }
                producer = null;
                producerReady = false;
            }
        }

        private void closeConsumer() {
            if (consumer != null) {
                try {
                    consumer.close(org.apache.kafka.clients.consumer.CloseOptions.timeout(
                            Duration.ofMillis(Math.min(5000, clientTimeoutMs))));
                } catch (RuntimeException e) {
                    log("copy: closing the consumer: " + e);
                }
                consumer = null;
            }
        }

        private void closeAll() {
            closeProducer();
            closeConsumer();
        }
    }

    static Map<String, Object> copy(Args a) {
        CopyLoop loop = new CopyLoop(a);
        Runner.snapshot(loop::result);
        Runner.watchdog(loop.deadline + 4L * loop.clientTimeoutMs + 30_000);
        return loop.run();
    }

    // ------------------------------------------------------------------ produce

    static Map<String, Object> produce(Args a) throws Exception {
        a.check("--bootstrap", "--topic", "--transactional-id", "--transactions",
                "--per-transaction", "--abort-every", "--first-transaction", "--leave-open",
                "--timeout-s", "--transaction-timeout-ms");
        String bootstrap = a.req("--bootstrap");
        String topic = a.req("--topic");
        String id = a.req("--transactional-id");
        long n = a.longOpt("--transactions", -1);
        int k = a.intOpt("--per-transaction", -1);
        if (n < 0 || k < 0) {
            throw new UsageException("--transactions N and --per-transaction K are required");
        }
        long abortEvery = a.longOpt("--abort-every", 0);
        long first = a.longOpt("--first-transaction", 0);
        boolean leaveOpen = a.flag("--leave-open");
        long start = System.currentTimeMillis();
        long timeoutMs = a.longOpt("--timeout-s", 60) * 1000;
        long deadline = start + timeoutMs;
        int clientTimeout = (int) Math.min(DEFAULT_CLIENT_TIMEOUT_MS * 2L, timeoutMs);
        Runner.watchdog(deadline + 2L * clientTimeout + 30_000);

        AtomicLong txCommitted = new AtomicLong();
        AtomicLong txAborted = new AtomicLong();
        AtomicLong recCommitted = new AtomicLong();
        AtomicLong recAborted = new AtomicLong();
        AtomicLong recOpen = new AtomicLong();
        Supplier<Map<String, Object>> result = () -> {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("transactions_committed", txCommitted.get());
            out.put("transactions_aborted", txAborted.get());
            out.put("records_committed", recCommitted.get());
            out.put("records_aborted", recAborted.get());
            out.put("records_open", recOpen.get());
            out.put("elapsed_ms", elapsed(start));
            return out;
        };
        Runner.snapshot(result);
        Properties p = producerProps(bootstrap, id, clientTimeout,
                a.intOpt("--transaction-timeout-ms", 60_000));
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "txncheck-produce");
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        try {
            producer.initTransactions();
            for (long i = 1; i <= n; i++) {
                if (System.currentTimeMillis() >= deadline || Runner.stopped()) {
                    Map<String, Object> out = result.get();
                    out.put("ok", false);
                    out.put("error", Runner.stopped() ? "interrupted" : "timeout");
                    return out;
                }
                long t = first + i - 1;
                boolean abort = abortEvery > 0 && i % abortEvery == 0;
                String prefix = abort ? "aborted-" : "committed-";
                producer.beginTransaction();
                for (int j = 0; j < k; j++) {
                    producer.send(new ProducerRecord<>(topic, utf8("k-" + t + "-" + j),
                            utf8(prefix + t + "-" + j)));
                }
                if (abort) {
                    producer.flush(); // so that the aborted records are in the log
                    producer.abortTransaction();
                    txAborted.incrementAndGet();
                    recAborted.addAndGet(k);
                } else {
                    producer.commitTransaction();
                    txCommitted.incrementAndGet();
                    recCommitted.addAndGet(k);
                }
            }
            if (leaveOpen) {
                long t = first + n;
                producer.beginTransaction();
                List<java.util.concurrent.Future<?>> acks = new ArrayList<>();
                for (int j = 0; j < k; j++) {
                    acks.add(producer.send(new ProducerRecord<>(topic, utf8("k-" + t + "-" + j),
                            utf8("open-" + t + "-" + j))));
                }
                producer.flush();
                for (java.util.concurrent.Future<?> f : acks) {
                    f.get(clientTimeout, TimeUnit.MILLISECONDS);
                }
                recOpen.addAndGet(k);
                Map<String, Object> out = result.get();
                out.put("ok", true);
                out.put("left_open", true);
                // End without closing: close() would abort the open transaction.
                Runner.emit(out, 0);
                Runtime.getRuntime().halt(0);
            }
        } finally {
            producer.close(Duration.ofMillis(clientTimeout));
        }
        Map<String, Object> out = result.get();
        out.put("ok", true);
        return out;
    }

    // ------------------------------------------------------------------ bench

    static Map<String, Object> bench(Args a) throws Exception {
        a.check("--bootstrap", "--topic", "--transactional-id", "--records", "--per-transaction",
                "--record-size", "--timeout-s", "--producer-prop");
        String topic = a.req("--topic");
        long records = a.longOpt("--records", -1);
        int k = a.intOpt("--per-transaction", -1);
        int size = a.intOpt("--record-size", 1024);
        if (records < 1 || k < 1 || size < 0) {
            throw new UsageException("--records N and --per-transaction K (at least 1) are required");
        }
        long start = System.currentTimeMillis();
        long deadline = start + a.longOpt("--timeout-s", 300) * 1000;
        Runner.watchdog(deadline + 2L * DEFAULT_CLIENT_TIMEOUT_MS + 30_000);
        Properties p = producerProps(a.req("--bootstrap"), a.req("--transactional-id"),
                DEFAULT_CLIENT_TIMEOUT_MS, 60_000);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "txncheck-bench");
        for (String kv : a.all("--producer-prop")) {
            int eq = kv.indexOf('=');
            if (eq < 1) {
                throw new UsageException("--producer-prop wants KEY=VALUE, not '" + kv + "'");
            }
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        java.util.concurrent.atomic.AtomicReference<String> firstError =
                new java.util.concurrent.atomic.AtomicReference<>();
        List<Double> commits = new ArrayList<>();
        byte[] payload = new byte[size];
        new java.util.Random().nextBytes(payload);
        com.sun.management.OperatingSystemMXBean os = (com.sun.management.OperatingSystemMXBean)
                java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            int partitions;
            while (true) {
                List<PartitionInfo> infos = producer.partitionsFor(topic);
                if (infos != null && !infos.isEmpty()) {
                    partitions = infos.size();
                    break;
                }
                if (System.currentTimeMillis() >= deadline) {
                    throw new TimeoutException("no partitions for " + topic);
                }
                sleep(200);
            }
            long t0 = System.nanoTime();
            producer.initTransactions();
            out.put("init_transactions_ms", (System.nanoTime() - t0) / 1e6);
            org.apache.kafka.clients.producer.Callback onAck = (meta, e) -> {
                if (e == null) {
                    acked.incrementAndGet();
                } else {
                    failed.incrementAndGet();
                    firstError.compareAndSet(null, e.toString());
                }
            };
            long cpu0 = os.getProcessCpuTime();
            long begin = System.nanoTime();
            for (long sent = 0; sent < records; ) {
                if (System.currentTimeMillis() >= deadline || Runner.stopped()) {
                    throw new TimeoutException((Runner.stopped() ? "interrupted" : "timeout")
                            + " after " + sent + " of " + records + " records");
                }
                long end = Math.min(records, sent + k);
                producer.beginTransaction();
                for (long i = sent; i < end; i++) {
                    producer.send(new ProducerRecord<>(topic, (int) (i % partitions), null,
                            payload), onAck);
                }
                sent = end;
                long c0 = System.nanoTime();
                producer.commitTransaction();
                commits.add((System.nanoTime() - c0) / 1e6);
            }
            out.put("seconds", (System.nanoTime() - begin) / 1e9);
            out.put("client_cpu", (os.getProcessCpuTime() - cpu0) / 1e9);
            out.put("partitions", partitions);
            out.put("transaction_v2", transactionV2(producer));
        }
        out.put("records", acked.get());
        out.put("failed", failed.get());
        out.put("transactions", commits.size());
        out.put("commit_ms", commits);
        out.put("ok", acked.get() == records && failed.get() == 0);
        if (firstError.get() != null) {
            out.put("error", firstError.get());
        }
        return out;
    }

    /** The producer's TransactionManager.isTransactionV2Enabled(), or null if unreadable. */
    static Boolean transactionV2(KafkaProducer<?, ?> producer) {
        try {
            java.lang.reflect.Field f = KafkaProducer.class.getDeclaredField("transactionManager");
            f.setAccessible(true);
            Object manager = f.get(producer);
            return (Boolean) manager.getClass().getMethod("isTransactionV2Enabled").invoke(manager);
        } catch (ReflectiveOperationException | RuntimeException e) {
            log("transaction_v2 unreadable: " + e);
            return null;
        }
    }

    // ------------------------------------------------------------------ read

    static Map<String, Object> read(Args a) throws Exception {
        a.check("--bootstrap", "--topic", "--isolation", "--timeout-s");
        String bootstrap = a.req("--bootstrap");
        String topic = a.req("--topic");
        String isolation = a.opt("--isolation", "read_committed");
        if (!isolation.equals("read_committed") && !isolation.equals("read_uncommitted")) {
            throw new UsageException("--isolation must be read_committed or read_uncommitted");
        }
        long start = System.currentTimeMillis();
        long deadline = start + a.longOpt("--timeout-s", 60) * 1000;
        Runner.watchdog(deadline + 2L * DEFAULT_CLIENT_TIMEOUT_MS + 30_000);
        List<String> values = new ArrayList<>();
        Map<String, Long> prefixes = new TreeMap<>();
        Map<TopicPartition, Long> perPartition = new TreeMap<>(
                (x, y) -> Integer.compare(x.partition(), y.partition()));
        Map<TopicPartition, Long> end;
        boolean complete = false;
        Properties p = consumerProps(bootstrap, DEFAULT_CLIENT_TIMEOUT_MS, isolation);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "txncheck-read");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "2000");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = topicPartitions(consumer, topic, deadline);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            end = consumer.endOffsets(tps);
            for (TopicPartition tp : tps) {
                perPartition.put(tp, 0L);
            }
            while (System.currentTimeMillis() < deadline && !Runner.stopped()) {
                boolean all = true;
                for (TopicPartition tp : tps) {
                    if (consumer.position(tp) < end.get(tp)) {
                        all = false;
                        break;
                    }
                }
                if (all) {
                    complete = true;
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() >= end.get(tp)) {
                        continue; // written after we took the end offsets
                    }
                    perPartition.merge(tp, 1L, Long::sum);
                    String v = str(r.value());
                    if (v == null) {
                        prefixes.merge("<null>", 1L, Long::sum);
                        continue;
                    }
                    int dash = v.indexOf('-');
                    prefixes.merge(dash < 0 ? v : v.substring(0, dash), 1L, Long::sum);
                    values.add(v);
                }
            }
        }
        Collections.sort(values);
        long count = 0;
        for (long c : perPartition.values()) {
            count += c;
        }
        long distinct = 0;
        List<String> duplicated = new ArrayList<>();
        for (int i = 0; i < values.size(); i++) {
            if (i == 0 || !values.get(i).equals(values.get(i - 1))) {
                distinct++;
            } else if (duplicated.size() < 20 && !duplicated.contains(values.get(i))) {
                duplicated.add(values.get(i));
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("ok", complete);
        if (!complete) {
            out.put("error", Runner.stopped() ? "interrupted" : "timeout: end offsets not reached");
        }
        out.put("isolation", isolation);
        out.put("count", count);
        out.put("prefixes", prefixes);
        out.put("duplicates", values.size() - distinct);
        out.put("duplicated", duplicated);
        out.put("partitions", byPartition(perPartition));
        out.put("end_offsets", byPartition(end));
        if (values.size() < MAX_PRINTED_VALUES) {
            out.put("values", values);
        } else {
            out.put("values_count", values.size());
            MessageDigest sha1 = MessageDigest.getInstance("SHA-1");
            for (int i = 0; i < values.size(); i++) {
                if (i > 0) {
                    sha1.update((byte) '\n');
                }
                sha1.update(utf8(values.get(i)));
            }
            StringBuilder hex = new StringBuilder();
            for (byte b : sha1.digest()) {
                hex.append(String.format("%02x", b & 0xff));
            }
            out.put("values_sha1", hex.toString());
        }
        out.put("elapsed_ms", elapsed(start));
        return out;
    }

    // ------------------------------------------------------------------ fence

    static Map<String, Object> fence(Args a) throws Exception {
        a.check("--bootstrap", "--topic", "--transactional-id", "--timeout-s");
        String bootstrap = a.req("--bootstrap");
        String topic = a.req("--topic");
        String id = a.req("--transactional-id");
        long start = System.currentTimeMillis();
        long timeoutMs = a.longOpt("--timeout-s", 60) * 1000;
        int clientTimeout = (int) Math.min(DEFAULT_CLIENT_TIMEOUT_MS * 2L, timeoutMs);
        Runner.watchdog(start + timeoutMs + 4L * clientTimeout + 30_000);
        Map<String, Object> out = new LinkedHashMap<>();
        Properties p = producerProps(bootstrap, id, clientTimeout, 60_000);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "txncheck-fence-older");
        KafkaProducer<byte[], byte[]> older = new KafkaProducer<>(p);
        KafkaProducer<byte[], byte[]> newer = null;
        try {
            older.initTransactions();
            older.beginTransaction();
            older.send(new ProducerRecord<>(topic, utf8("k-fence"), utf8("fence-older-1")))
                    .get(clientTimeout, TimeUnit.MILLISECONDS);
            p.put(ProducerConfig.CLIENT_ID_CONFIG, "txncheck-fence-newer");
            newer = new KafkaProducer<>(p);
            newer.initTransactions();
            boolean olderCommitted = false;
            Throwable olderError = null;
            try {
                older.commitTransaction();
                olderCommitted = true;
            } catch (KafkaException e) {
                olderError = e;
            }
            out.put("older_committed", olderCommitted);
            out.put("older_exception", olderError == null ? null : olderError.getClass().getName());
            List<String> chain = new ArrayList<>();
            boolean fenced = false;
            for (Throwable t = olderError; t != null && chain.size() < 10; t = t.getCause() == t ? null : t.getCause()) {
                chain.add(t.getClass().getName() + ": " + t.getMessage());
                fenced |= t instanceof ProducerFencedException || t instanceof InvalidProducerEpochException;
            }
            out.put("older_exception_chain", chain);
            out.put("older_fenced", fenced);
            newer.beginTransaction();
            newer.send(new ProducerRecord<>(topic, utf8("k-fence"), utf8("fence-newer-1")));
            newer.commitTransaction();
            out.put("newer_committed", true);
            out.put("ok", fenced && !olderCommitted);
            if (!fenced) {
                out.put("error", "the older producer was not fenced: "
                        + (olderError == null ? "its commit succeeded" : olderError.toString()));
            }
        } finally {
            older.close(Duration.ofMillis(clientTimeout));
            if (newer != null) {
                newer.close(Duration.ofMillis(clientTimeout));
            }
        }
        out.put("elapsed_ms", elapsed(start));
        return out;
    }

    // ------------------------------------------------------------------ arguments

    static final class Args {
        /** Options that take no value. */
        private static final Set<String> FLAGS = new HashSet<>(Arrays.asList("--assign",
                "--leave-open"));
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

        /** Rejects positionals and options the mode does not know. */
        void check(String... allowed) {
            Set<String> ok = new HashSet<>(Arrays.asList(allowed));
            if (!positionals.isEmpty()) {
                throw new UsageException("unexpected argument '" + positionals.get(0) + "'");
            }
            List<String> given = new ArrayList<>(options.keySet());
            given.addAll(flags);
            for (String name : given) {
                if (!ok.contains(name)) {
                    throw new UsageException("unknown option " + name + " (known: "
                            + String.join(" ", allowed) + ")");
                }
            }
        }

        boolean flag(String name) {
            return flags.contains(name);
        }

        List<String> all(String name) {
            return options.getOrDefault(name, Collections.emptyList());
        }

        String opt(String name, String dflt) {
            List<String> v = options.get(name);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        String req(String name) {
            String v = opt(name, null);
            if (v == null || v.isEmpty()) {
                throw new UsageException(name + " is required");
            }
            return v;
        }

        int intOpt(String name, int dflt) {
            long v = longOpt(name, dflt);
            if (v != (int) v) {
                throw new UsageException(name + ": out of range: " + v);
            }
            return (int) v;
        }

        long longOpt(String name, long dflt) {
            String v = opt(name, null);
            if (v == null) {
                return dflt;
            }
            try {
                return Long.parseLong(v);
            } catch (NumberFormatException e) {
                throw new UsageException(name + ": not an integer: '" + v + "'");
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

// WordCount: a Kafka Streams word count with processing.guarantee=exactly_once_v2, for the
// transaction tests (tests/txn_programs.py runs it; tests/clients/java-txn/setup.sh builds it).
// The output, the exit codes, SIGTERM and the watchdog follow TxnCheck.java's conventions (its
// Runner, Args and Json are shared).
//
// Modes:
//
//   run --bootstrap B --input T --output T2 --application-id A --state-dir D --timeout-s S
//       [--expected-words N] [--replication-factor R=-1] [--commit-interval-ms 100]
//     Topology: the input's values (String lines) are split into words, a word being a maximal
//     run of characters other than Java's \s (space, \t, \n, \x0B, \f, \r); the words are
//     grouped by word (a repartition topic) and counted into a KTable (store "word-counts",
//     changelogged); the table's updates go to T2 (String key = word, Long value = count,
//     LongSerializer: 8 bytes big-endian). Internal topics get replication.factor R (-1: the
//     brokers' default). The output topics T2 must exist (the input too).
//     Meanwhile a read_committed consumer follows T2 and keeps the latest count per word.
//     Ends: with --expected-words N, once the latest counts add up to N (ok when exactly N)
//     or at the deadline (ok false); without it, at the deadline or on SIGTERM (ok unless the
//     Streams client died). Then KafkaStreams.close (30 s at most) and one JSON line:
//     words_total (sum of the latest counts seen), distinct_words, expected_words, reached,
//     state (the Streams state before closing), transitions (state changes, in order),
//     thread_replacements (uncaught exceptions answered with REPLACE_THREAD), elapsed_ms.
//
//   read --bootstrap B --topic T2 [--timeout-s 60]
//     Reads T2 from the beginning with read_committed up to its end offsets (taken at the
//     start) and prints the latest count per word: counts (word -> count), distinct_words,
//     words_total, records, end_offsets.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

public final class WordCount {

    private static final Pattern WHITESPACE = Pattern.compile("\\s+");
    private static final long CLOSE_TIMEOUT_MS = 30_000;

    private WordCount() {
    }

    public static void main(String[] argv) {
        TxnCheck.Runner.run("WordCount", argv, (command, args) -> {
            switch (command) {
                case "run":
                    return run(args);
                case "read":
                    return read(args);
                default:
                    throw new TxnCheck.UsageException("unknown mode '" + command
                            + "'; expected run or read");
            }
        });
    }

    /** Follows the output topic (read_committed): the latest count per word. */
    static final class Counts {
        final Map<String, Long> latest = new ConcurrentHashMap<>();
        final AtomicLong records = new AtomicLong();
        final AtomicLong total = new AtomicLong();

        void add(ConsumerRecord<String, Long> r) {
            records.incrementAndGet();
            if (r.key() == null || r.value() == null) {
                return;
            }
            Long before = latest.put(r.key(), r.value());
            total.addAndGet(r.value() - (before == null ? 0 : before));
        }
    }

    static KafkaConsumer<String, Long> countsConsumer(String bootstrap, String clientId) {
        Properties p = TxnCheck.consumerProps(bootstrap, TxnCheck.DEFAULT_CLIENT_TIMEOUT_MS,
                "read_committed");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, LongDeserializer.class.getName());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        return new KafkaConsumer<>(p);
    }

    static Map<String, Object> run(TxnCheck.Args a) {
        a.check("--bootstrap", "--input", "--output", "--application-id", "--state-dir",
                "--timeout-s", "--expected-words", "--replication-factor", "--commit-interval-ms");
        String bootstrap = a.req("--bootstrap");
        String input = a.req("--input");
        String output = a.req("--output");
        long timeoutS = a.longOpt("--timeout-s", -1);
        if (timeoutS <= 0) {
            throw new TxnCheck.UsageException("--timeout-s S (> 0) is required");
        }
        long expected = a.longOpt("--expected-words", -1);
        long start = System.currentTimeMillis();
        long deadline = start + timeoutS * 1000;
        TxnCheck.Runner.watchdog(deadline + 2 * CLOSE_TIMEOUT_MS + 60_000);
        if (expected < 0) {
            TxnCheck.Runner.stopIsSuccess();
        }

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.req("--application-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, a.intOpt("--replication-factor", -1));
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.longOpt("--commit-interval-ms", 100));
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.req("--state-dir"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> line == null ? Collections.<String>emptyList()
                        : Arrays.asList(WHITESPACE.split(line)))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("word-counts")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        List<String> transitions = Collections.synchronizedList(new ArrayList<>());
        AtomicLong replacements = new AtomicLong();
        Counts counts = new Counts();
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setStateListener((now, before) -> {
            TxnCheck.log("wordcount: " + before + " -> " + now);
            if (transitions.size() < 200) {
                transitions.add(String.valueOf(now));
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            TxnCheck.log("wordcount: uncaught " + e + "; replacing the stream thread");
            replacements.incrementAndGet();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Supplier<Map<String, Object>> result = () -> {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("words_total", counts.total.get());
            out.put("distinct_words", counts.latest.size());
            out.put("expected_words", expected);
            out.put("reached", expected >= 0 && counts.total.get() >= expected);
            out.put("output_records", counts.records.get());
            out.put("state", String.valueOf(streams.state()));
            synchronized (transitions) {
                out.put("transitions", new ArrayList<>(transitions));
            }
            out.put("thread_replacements", replacements.get());
            out.put("elapsed_ms", TxnCheck.elapsed(start));
            return out;
        };
        TxnCheck.Runner.snapshot(result);

        String error = null;
        String stateBeforeClose;
        streams.start();
        try (KafkaConsumer<String, Long> follower = countsConsumer(bootstrap, "wordcount-follower")) {
            List<TopicPartition> tps = TxnCheck.topicPartitions(follower, output, deadline);
            follower.assign(tps);
            follower.seekToBeginning(tps);
            while (true) {
                if (expected >= 0 && counts.total.get() >= expected) {
                    break;
                }
                if (TxnCheck.Runner.stopped()) {
                    if (expected >= 0) {
                        error = "interrupted (SIGTERM) before the expected words were counted";
                    }
                    break;
                }
                if (System.currentTimeMillis() >= deadline) {
                    if (expected >= 0) {
                        error = "timeout: " + counts.total.get() + " of " + expected
                                + " words counted";
                    }
                    break;
                }
                KafkaStreams.State s = streams.state();
                if (s == KafkaStreams.State.ERROR || s == KafkaStreams.State.NOT_RUNNING
                        || s == KafkaStreams.State.PENDING_ERROR) {
                    error = "the Streams client stopped: " + s;
                    break;
                }
                for (ConsumerRecord<String, Long> r : follower.poll(Duration.ofMillis(200))) {
                    counts.add(r);
                }
            }
        } finally {
            stateBeforeClose = String.valueOf(streams.state());
            boolean closed = streams.close(Duration.ofMillis(CLOSE_TIMEOUT_MS));
            if (!closed) {
                TxnCheck.log("wordcount: KafkaStreams.close did not finish in time");
            }
        }
        Map<String, Object> out = result.get();
        out.put("state", stateBeforeClose);
        if (expected >= 0 && error == null && counts.total.get() != expected) {
            error = "counted " + counts.total.get() + " words, expected " + expected;
        }
        out.put("ok", error == null);
        if (error != null) {
            out.put("error", error);
        }
        if (TxnCheck.Runner.stopped()) {
            out.put("interrupted", true);
        }
        return out;
    }

    static Map<String, Object> read(TxnCheck.Args a) {
        a.check("--bootstrap", "--topic", "--timeout-s");
        String bootstrap = a.req("--bootstrap");
        String topic = a.req("--topic");
        long start = System.currentTimeMillis();
        long deadline = start + a.longOpt("--timeout-s", 60) * 1000;
        TxnCheck.Runner.watchdog(deadline + 2L * TxnCheck.DEFAULT_CLIENT_TIMEOUT_MS + 30_000);
        Counts counts = new Counts();
        Map<TopicPartition, Long> end;
        boolean complete = false;
        try (KafkaConsumer<String, Long> consumer = countsConsumer(bootstrap, "wordcount-read")) {
            List<TopicPartition> tps = TxnCheck.topicPartitions(consumer, topic, deadline);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            end = consumer.endOffsets(tps);
            while (System.currentTimeMillis() < deadline && !TxnCheck.Runner.stopped()) {
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
                for (ConsumerRecord<String, Long> r : consumer.poll(Duration.ofMillis(200))) {
                    if (r.offset() < end.get(new TopicPartition(r.topic(), r.partition()))) {
                        counts.add(r);
                    }
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("ok", complete);
        if (!complete) {
            out.put("error", "timeout: end offsets not reached");
        }
        out.put("counts", new TreeMap<>(counts.latest));
        out.put("distinct_words", counts.latest.size());
        out.put("words_total", counts.total.get());
        out.put("records", counts.records.get());
        out.put("end_offsets", TxnCheck.byPartition(end));
        out.put("elapsed_ms", TxnCheck.elapsed(start));
        return out;
    }
}

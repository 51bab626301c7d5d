package main

// produce: an idempotent producer (franz-go's default; acks=all) writing --records records,
// record n with key "n" and value "<prefix>-n" to partition n % --partitions, at most --rate
// records a second (0: as fast as the client takes them), so that a test can kill a leader
// while it runs.
//
// At --timeout it stops producing and waits at most --drain for what is in flight (an
// idempotent franz-go producer does not give up on a record already sent, so that a retry
// cannot duplicate it); records still unresolved then are reported as such.
//
// With --progress-file, the acks so far are written there every 100 ms (see progressJSON),
// for a test to tell when the producer has got somewhere and when writes go on after a fault.
//
// Output fields: records, sent, acked (a list of [n, partition, offset], by n), acked_count,
// failed (the first 100 n that failed), failed_count, unresolved, order_violations (acks of
// one partition whose offsets did not rise with n, as [partition, n before, n, offset]; the
// first 20), violations_count, errors_count, errors, interrupted, timed_out, elapsed_ms.
// ok: every record acknowledged, in order, no error.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type produceConfig struct {
	common
	topic      string
	records    int
	partitions int
	rate       float64
	prefix     string
	linger     time.Duration
	drain      time.Duration
	progress   string
}

const (
	pending = iota
	acked
	failed
)

type outcome struct {
	state     int
	partition int32
	offset    int64
}

func produceMode(fs *flag.FlagSet, args []string) func() {
	cfg := &produceConfig{}
	cfg.register(fs)
	fs.StringVar(&cfg.topic, "topic", "", "topic to write (required)")
	fs.IntVar(&cfg.records, "records", 0, "records to write (required)")
	fs.IntVar(&cfg.partitions, "partitions", 1, "record n goes to partition n % partitions")
	fs.Float64Var(&cfg.rate, "rate", 0, "records per second; 0: no limit")
	fs.StringVar(&cfg.prefix, "prefix", "franz", "values are <prefix>-<n>")
	fs.DurationVar(&cfg.linger, "linger", 5*time.Millisecond, "producer linger")
	fs.DurationVar(&cfg.drain, "drain", 30*time.Second, "past --timeout, how long to wait for records in flight")
	fs.StringVar(&cfg.progress, "progress-file", "", "if set, rewritten every 100 ms with the acks so far")
	_ = fs.Parse(args)
	if cfg.topic == "" || cfg.records <= 0 || cfg.partitions < 1 || cfg.rate < 0 {
		fs.Usage()
		usage()
	}
	return func() { runProduce(cfg) }
}

func runProduce(cfg *produceConfig) {
	start := time.Now()
	ctx, cancel, interrupted := cfg.runContext()
	defer cancel()
	var errs errorLog
	opts := append(cfg.clientOpts("producer"),
		kgo.DefaultProduceTopic(cfg.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(cfg.linger),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		errs.add("creating the client: %v", err)
		count, first := errs.snapshot()
		report(map[string]any{"records": cfg.records, "errors_count": count, "errors": first}, false)
	}

	var mu sync.Mutex
	outcomes := make([]outcome, cfg.records)
	lastAcked := make(map[int32][2]int64) // partition -> (n, offset) of its latest ack
	violations := [][4]int64{}            // partition, n before, n after, offset after
	violationCount := 0
	var inFlight sync.WaitGroup

	if cfg.progress != "" {
		stop := make(chan struct{})
		defer close(stop)
		go writeProgress(cfg.progress, stop, func() ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			return progressJSON(outcomes, lastAcked)
		})
	}

	sent := 0
	for n := 0; n < cfg.records; n++ {
		if cfg.rate > 0 {
			due := start.Add(time.Duration(float64(n) / cfg.rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					timer.Stop()
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
		record := &kgo.Record{
			Key:       []byte(strconv.Itoa(n)),
			Value:     []byte(fmt.Sprintf("%s-%d", cfg.prefix, n)),
			Partition: int32(n % cfg.partitions),
		}
		inFlight.Add(1)
		sent++
		// Background: records may outlive the run's context while they are retried; the
		// deadline is enforced by not producing more and by the bounded drain below.
		cl.Produce(context.Background(), record, func(r *kgo.Record, err error) {
			defer inFlight.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				outcomes[n] = outcome{state: failed}
				errs.add("record %d: %v", n, err)
				return
			}
			outcomes[n] = outcome{state: acked, partition: r.Partition, offset: r.Offset}
			// franz-go calls the promises of one partition in produce order, so the acks of a
			// partition must come with rising n and rising offsets.
			if last, ok := lastAcked[r.Partition]; ok && (int64(n) <= last[0] || r.Offset <= last[1]) {
				violationCount++
				if len(violations) < 20 {
					violations = append(violations, [4]int64{int64(r.Partition), last[0], int64(n), r.Offset})
				}
			}
			lastAcked[r.Partition] = [2]int64{int64(n), r.Offset}
		})
	}

	drained := make(chan struct{})
	go func() {
		inFlight.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(time.Until(start.Add(cfg.timeout)) + cfg.drain):
	}

	mu.Lock()
	ackedList := make([][3]int64, 0, sent)
	failedList := []int{}
	failedCount, unresolved := 0, 0
	for n := 0; n < sent; n++ {
		switch o := outcomes[n]; o.state {
		case acked:
			ackedList = append(ackedList, [3]int64{int64(n), int64(o.partition), o.offset})
		case failed:
			failedCount++
			if len(failedList) < 100 {
				failedList = append(failedList, n)
			}
		default:
			unresolved++
		}
	}
	vs, vc := violations, violationCount
	mu.Unlock()
	errCount, errList := errs.snapshot()
	timedOut := sent < cfg.records && !interrupted() || unresolved > 0
	result := map[string]any{
		"records":          cfg.records,
		"sent":             sent,
		"acked":            ackedList,
		"acked_count":      len(ackedList),
		"failed":           failedList,
		"failed_count":     failedCount,
		"unresolved":       unresolved,
		"order_violations": vs,
		"violations_count": vc,
		"errors_count":     errCount,
		"errors":           errList,
		"interrupted":      interrupted(),
		"timed_out":        timedOut,
		"elapsed_ms":       time.Since(start).Milliseconds(),
	}
	ok := len(ackedList) == cfg.records && vc == 0 && errCount == 0 && !interrupted()
	if unresolved == 0 {
		cl.Close()
	} // else: Close would wait on records the broker may never answer for; exit regardless
	report(result, ok)
}

// progressJSON: {"acked": count, "last_offsets": {"partition": offset of its latest ack}}.
func progressJSON(outcomes []outcome, lastAcked map[int32][2]int64) ([]byte, error) {
	count := 0
	for _, o := range outcomes {
		if o.state == acked {
			count++
		}
	}
	last := make(map[string]int64, len(lastAcked))
	for p, a := range lastAcked {
		last[strconv.Itoa(int(p))] = a[1]
	}
	return json.Marshal(map[string]any{"acked": count, "last_offsets": last})
}

// writeProgress replaces path with snapshot() every 100 ms until stop closes: written to a
// temporary file and renamed, so that a reader never sees half of one.
func writeProgress(path string, stop <-chan struct{}, snapshot func() ([]byte, error)) {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		if data, err := snapshot(); err == nil {
			tmp := path + ".tmp"
			if os.WriteFile(tmp, data, 0o644) == nil {
				_ = os.Rename(tmp, path)
			}
		}
		select {
		case <-ticker.C:
		case <-stop:
			return
		}
	}
}

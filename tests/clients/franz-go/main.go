// Command franzcheck drives franz-go (github.com/twmb/franz-go), the Go Kafka client, against
// a kafkube cluster for the test suite (tests/test_franz_go.py). Built by setup.sh next to it.
//
// Modes:
//
//	franzcheck etl     --bootstrap B --input T --output T --group G --records N ...
//	franzcheck produce --bootstrap B --topic T --records N --partitions P ...
//	franzcheck share   --bootstrap B --topic T --group G --records N --members M
//
// etl (etl.go) is a transactional consume-transform-produce loop: several members of one
// consumer group, each a kgo.GroupTransactSession with a transactional ID of its own, copy
// every input record to the output topic (value + ":etl") and commit the input offsets in
// the same transaction; members join and leave mid-run, and some transactions are aborted
// on purpose. produce (produce.go) is an idempotent acks=all producer writing numbered
// records, optionally rate-limited so that a test can kill a leader while it runs. share
// (share.go) reads a topic with franz-go's share consumer (KIP-932).
//
// Each run prints exactly one JSON object on stdout as its last (and only) line, with "ok"
// true exactly when the exit code is 0; everything else (franz-go's log at --log-level,
// progress) goes to stderr. SIGTERM or SIGINT ends a run early: it reports what it has,
// with "interrupted": true and ok false. Exit codes: 0 ok, 1 the run failed, 2 bad usage.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// common holds the flags every mode takes.
type common struct {
	bootstrap string
	timeout   time.Duration
	logLevel  string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.bootstrap, "bootstrap", "127.0.0.1:9092", "comma-separated seed brokers")
	fs.DurationVar(&c.timeout, "timeout", 90*time.Second,
		"the whole run's deadline; past it the run stops and reports ok=false")
	fs.StringVar(&c.logLevel, "log-level", "warn", "franz-go's log level: none, error, warn, info, debug")
}

// seeds splits --bootstrap into kgo.SeedBrokers' arguments.
func (c *common) seeds() []string {
	var out []string
	for _, s := range strings.Split(c.bootstrap, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// clientOpts are the options every client of every mode gets: the seeds and a logger that
// stamps each line with the time and the client's name, so that a failing test's stderr
// can be lined up with the brokers' logs.
func (c *common) clientOpts(name string) []kgo.Opt {
	level := kgo.LogLevelWarn
	switch c.logLevel {
	case "none":
		level = kgo.LogLevelNone
	case "error":
		level = kgo.LogLevelError
	case "info":
		level = kgo.LogLevelInfo
	case "debug":
		level = kgo.LogLevelDebug
	}
	prefix := func() string {
		return time.Now().UTC().Format("15:04:05.000") + " " + name + " "
	}
	return []kgo.Opt{
		kgo.SeedBrokers(c.seeds()...),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, prefix)),
	}
}

// runContext is canceled at the deadline or on SIGTERM/SIGINT; interrupted() says whether a
// signal did it.
func (c *common) runContext() (ctx context.Context, cancel func(), interrupted func() bool) {
	ctx, cancelTimeout := context.WithTimeout(context.Background(), c.timeout)
	ctx, cancelSignal := context.WithCancel(ctx)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	var mu sync.Mutex
	var signaled bool
	go func() {
		select {
		case <-signals:
			mu.Lock()
			signaled = true
			mu.Unlock()
			cancelSignal()
		case <-ctx.Done():
		}
	}()
	cancel = func() {
		signal.Stop(signals)
		cancelSignal()
		cancelTimeout()
	}
	interrupted = func() bool {
		mu.Lock()
		defer mu.Unlock()
		return signaled
	}
	return ctx, cancel, interrupted
}

// errorLog keeps the first few distinct error messages of a run and counts all of them: a
// failing run says what went wrong without printing thousands of lines.
type errorLog struct {
	mu       sync.Mutex
	count    int
	first    []string
	distinct map[string]int
}

const keptErrors = 20

func (e *errorLog) add(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintf(os.Stderr, "%s ERROR %s\n", time.Now().UTC().Format("15:04:05.000"), msg)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count++
	if e.distinct == nil {
		e.distinct = make(map[string]int)
	}
	e.distinct[msg]++
	if e.distinct[msg] == 1 && len(e.first) < keptErrors {
		e.first = append(e.first, msg)
	}
}

func (e *errorLog) snapshot() (int, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.count, append([]string{}, e.first...)
}

// report prints the result as one JSON line and exits: 0 when ok, else 1.
func report(result map[string]any, ok bool) {
	result["ok"] = ok
	line, err := json.Marshal(result)
	if err != nil {
		line = []byte(fmt.Sprintf(`{"ok":false,"errors":[%q]}`, "encoding the result: "+err.Error()))
		ok = false
	}
	fmt.Println(string(line))
	if ok {
		os.Exit(0)
	}
	os.Exit(1)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: franzcheck etl|produce|share [flags]  (franzcheck MODE -h lists the flags)")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	mode, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	var run func()
	switch mode {
	case "etl":
		run = etlMode(fs, args)
	case "produce":
		run = produceMode(fs, args)
	case "share":
		run = shareMode(fs, args)
	default:
		usage()
	}
	run()
}

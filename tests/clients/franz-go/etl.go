package main

// etl: the transactional consume-transform-produce loop, with a group that changes under it.
//
// --members slots run at once. Slot 0 starts at once; slot i > 0 starts its first member only
// once i/(2*members) of the input has been committed, so that members join a group that is
// already working. Each member is a kgo.GroupTransactSession with its own transactional ID
// (<txn-prefix>-<slot>-<generation>). The first --leaves members to start are given a
// lifetime of --min-txns..--max-txns transactions; when it is spent they close (leaving the
// group) and their slot starts a new member, which joins. Every join and leave rebalances the
// group, and GroupTransactSession aborts a transaction the rebalance took partitions from.
//
// Each transaction is one poll of at most --poll-records records, each copied to --output
// with ":etl" appended to its value, and the polled offsets committed in the transaction.
// With probability --abort-rate (math/rand/v2 seeded by --seed and the slot) a transaction
// is aborted on purpose, after a flush, so that what it wrote is in the log and
// read_committed readers have something to skip.
//
// The run counts each input (partition, offset) of a committed transaction; one counted
// twice is a duplicate (an error). It ends when --records input records are committed, or
// at --timeout. Output fields: records, consumed, duplicates, transactions_committed,
// aborts_chosen, aborts_rebalance, records_aborted_flushed, members_started, members_left,
// assignments, revocations, losses, balancer, seed, members (per member: id, slot,
// generation, transactions, committed, aborted, lifetime), errors_count, errors,
// interrupted, timed_out, elapsed_ms.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type etlConfig struct {
	common
	input, output, group string
	records              int64
	members              int
	leaves               int
	balancer             string
	serverSide           bool
	abortRate            float64
	seed                 uint64
	minTxns, maxTxns     int
	pollRecords          int
	txnPrefix            string
	sessionTimeout       time.Duration
	rebalanceTimeout     time.Duration
	txnTimeout           time.Duration
}

type partOffset struct {
	partition int32
	offset    int64
}

type memberSummary struct {
	ID           string `json:"id"`
	Slot         int    `json:"slot"`
	Generation   int    `json:"generation"`
	Transactions int    `json:"transactions"`
	Committed    int    `json:"committed"`
	Aborted      int    `json:"aborted"`
	Lifetime     int    `json:"lifetime"` // -1: stays until the input is done
}

type etlRun struct {
	cfg  *etlConfig
	ctx  context.Context
	errs errorLog

	done     chan struct{}
	doneOnce sync.Once

	mu         sync.Mutex
	committed  map[partOffset]string // input position -> transactional ID that committed it
	consumed   int64                 // len(committed) plus duplicates
	duplicates int
	leavesLeft int
	summaries  []memberSummary

	commits, abortsChosen, abortsRebalance, abortedFlushed atomic.Int64
	membersStarted, membersLeft                            atomic.Int64
	assignments, revocations, losses                       atomic.Int64
}

func etlMode(fs *flag.FlagSet, args []string) func() {
	cfg := &etlConfig{}
	cfg.register(fs)
	fs.StringVar(&cfg.input, "input", "", "topic to consume (required)")
	fs.StringVar(&cfg.output, "output", "", "topic to produce to (required)")
	fs.StringVar(&cfg.group, "group", "", "consumer group (required)")
	fs.Int64Var(&cfg.records, "records", 0, "records in the input; the run ends once all are committed (required)")
	fs.IntVar(&cfg.members, "members", 3, "members running at once")
	fs.IntVar(&cfg.leaves, "leaves", 3, "members that leave mid-run (each replaced by a new one)")
	fs.StringVar(&cfg.balancer, "balancer", "range", "range, roundrobin, sticky or cooperative-sticky")
	fs.BoolVar(&cfg.serverSide, "server-side", false, "the KIP-848 consumer group protocol: the broker assigns (range or sticky balancer)")
	fs.Float64Var(&cfg.abortRate, "abort-rate", 0.1, "probability that a transaction is aborted on purpose")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the aborts and lifetimes")
	fs.IntVar(&cfg.minTxns, "min-txns", 4, "shortest lifetime of a leaving member, in transactions")
	fs.IntVar(&cfg.maxTxns, "max-txns", 12, "longest lifetime of a leaving member, in transactions")
	fs.IntVar(&cfg.pollRecords, "poll-records", 500, "at most this many records per transaction")
	fs.StringVar(&cfg.txnPrefix, "txn-prefix", "franz-etl", "transactional IDs are <prefix>-<slot>-<generation>")
	fs.DurationVar(&cfg.sessionTimeout, "session-timeout", 20*time.Second, "group session timeout")
	fs.DurationVar(&cfg.rebalanceTimeout, "rebalance-timeout", 30*time.Second, "group rebalance timeout")
	fs.DurationVar(&cfg.txnTimeout, "transaction-timeout", 60*time.Second, "transaction.timeout.ms")
	_ = fs.Parse(args)
	if cfg.input == "" || cfg.output == "" || cfg.group == "" || cfg.records <= 0 || cfg.members < 1 ||
		cfg.minTxns < 1 || cfg.maxTxns < cfg.minTxns || cfg.pollRecords < 1 || balancerOf(cfg.balancer) == nil {
		fs.Usage()
		usage()
	}
	return func() { runETL(cfg) }
}

func balancerOf(name string) kgo.GroupBalancer {
	switch name {
	case "range":
		return kgo.RangeBalancer()
	case "roundrobin":
		return kgo.RoundRobinBalancer()
	case "sticky":
		return kgo.StickyBalancer()
	case "cooperative-sticky":
		return kgo.CooperativeStickyBalancer()
	}
	return nil
}

func runETL(cfg *etlConfig) {
	start := time.Now()
	ctx, cancel, interrupted := cfg.runContext()
	defer cancel()
	r := &etlRun{
		cfg:        cfg,
		ctx:        ctx,
		done:       make(chan struct{}),
		committed:  make(map[partOffset]string),
		summaries:  []memberSummary{},
		leavesLeft: cfg.leaves,
	}
	var wg sync.WaitGroup
	for slot := range cfg.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.slot(slot)
		}()
	}
	wg.Wait()

	r.mu.Lock()
	consumed, duplicates, summaries := r.consumed, r.duplicates, r.summaries
	r.mu.Unlock()
	errCount, errs := r.errs.snapshot()
	timedOut := ctx.Err() != nil && !interrupted() && consumed < cfg.records
	result := map[string]any{
		"records":                 cfg.records,
		"consumed":                consumed,
		"duplicates":              duplicates,
		"transactions_committed":  r.commits.Load(),
		"aborts_chosen":           r.abortsChosen.Load(),
		"aborts_rebalance":        r.abortsRebalance.Load(),
		"records_aborted_flushed": r.abortedFlushed.Load(),
		"members_started":         r.membersStarted.Load(),
		"members_left":            r.membersLeft.Load(),
		"assignments":             r.assignments.Load(),
		"revocations":             r.revocations.Load(),
		"losses":                  r.losses.Load(),
		"balancer":                cfg.balancer,
		"seed":                    cfg.seed,
		"members":                 summaries,
		"errors_count":            errCount,
		"errors":                  errs,
		"interrupted":             interrupted(),
		"timed_out":               timedOut,
		"elapsed_ms":              time.Since(start).Milliseconds(),
	}
	ok := errCount == 0 && duplicates == 0 && consumed == cfg.records && !interrupted() && !timedOut
	report(result, ok)
}

// finished: the whole input is committed, or the run is over.
func (r *etlRun) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return r.ctx.Err() != nil
	}
}

func (r *etlRun) consumedSoFar() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.consumed
}

// slot runs one member after another until the input is done; a member that fails (an error
// franz-go calls non-retryable) ends its slot, the others go on.
func (r *etlRun) slot(slot int) {
	rng := rand.New(rand.NewPCG(r.cfg.seed, uint64(slot)))
	if slot > 0 {
		joinAt := int64(slot) * r.cfg.records / int64(2*r.cfg.members)
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		for !r.finished() && r.consumedSoFar() < joinAt {
			select {
			case <-ticker.C:
			case <-r.done:
			case <-r.ctx.Done():
			}
		}
	}
	for generation := 0; !r.finished(); generation++ {
		lifetime := -1
		r.mu.Lock()
		if r.leavesLeft > 0 {
			r.leavesLeft--
			lifetime = r.cfg.minTxns + rng.IntN(r.cfg.maxTxns-r.cfg.minTxns+1)
		}
		r.mu.Unlock()
		if !r.member(slot, generation, lifetime, rng) {
			return
		}
	}
}

func partitionsIn(m map[string][]int32) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}

// member runs one GroupTransactSession until its lifetime is spent (it then leaves the group)
// or the input is done. False if it failed.
func (r *etlRun) member(slot, generation, lifetime int, rng *rand.Rand) bool {
	cfg := r.cfg
	txnID := fmt.Sprintf("%s-%d-%d", cfg.txnPrefix, slot, generation)
	summary := memberSummary{ID: txnID, Slot: slot, Generation: generation, Lifetime: lifetime}
	defer func() {
		r.mu.Lock()
		r.summaries = append(r.summaries, summary)
		r.mu.Unlock()
	}()
	opts := append(cfg.clientOpts(fmt.Sprintf("m%d.%d", slot, generation)),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(cfg.txnTimeout),
		kgo.ConsumerGroup(cfg.group),
		kgo.ConsumeTopics(cfg.input),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(balancerOf(cfg.balancer)),
		kgo.SessionTimeout(cfg.sessionTimeout),
		kgo.RebalanceTimeout(cfg.rebalanceTimeout),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if partitionsIn(m) > 0 {
				r.assignments.Add(1)
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if partitionsIn(m) > 0 {
				r.revocations.Add(1)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if partitionsIn(m) > 0 {
				r.losses.Add(1)
			}
		}),
	)
	if cfg.serverSide {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		r.errs.add("%s: creating the session: %v", txnID, err)
		return false
	}
	defer sess.Close() // leaves the group
	r.membersStarted.Add(1)

	for !r.finished() {
		pollCtx, cancel := context.WithTimeout(r.ctx, 250*time.Millisecond)
		fetches := sess.PollRecords(pollCtx, cfg.pollRecords)
		cancel()
		if fetches.IsClientClosed() {
			r.errs.add("%s: client closed under the loop", txnID)
			return false
		}
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			r.errs.add("%s: fetch %s/%d: %v", txnID, fe.Topic, fe.Partition, fe.Err)
		}
		if fetches.NumRecords() == 0 {
			continue
		}
		ok := r.transaction(sess, txnID, fetches, rng, &summary)
		if !ok {
			return false
		}
		if lifetime >= 0 && summary.Transactions >= lifetime {
			r.membersLeft.Add(1)
			return true
		}
	}
	return true
}

// transaction copies one poll's records to the output in one transaction and ends it: with
// a commit unless the random draw says abort. False if it failed.
func (r *etlRun) transaction(sess *kgo.GroupTransactSession, txnID string, fetches kgo.Fetches,
	rng *rand.Rand, summary *memberSummary) bool {
	cfg := r.cfg
	if err := sess.Begin(); err != nil {
		r.errs.add("%s: begin: %v", txnID, err)
		return false
	}
	var polled []partOffset
	fetches.EachRecord(func(rec *kgo.Record) {
		polled = append(polled, partOffset{rec.Partition, rec.Offset})
		value := make([]byte, 0, len(rec.Value)+4)
		value = append(append(value, rec.Value...), ":etl"...)
		out := &kgo.Record{Topic: cfg.output, Key: rec.Key, Value: value}
		sess.Produce(r.ctx, out, func(_ *kgo.Record, err error) {
			if err != nil && !errors.Is(err, kgo.ErrAborting) && r.ctx.Err() == nil {
				r.errs.add("%s: produce to %s: %v", txnID, cfg.output, err)
			}
		})
	})
	wantCommit := rng.Float64() >= cfg.abortRate
	if !wantCommit {
		// Into the log before the abort, so that the abort has records to hide.
		if err := sess.Client().Flush(r.ctx); err != nil {
			if r.ctx.Err() != nil {
				return true
			}
			r.errs.add("%s: flush before an abort: %v", txnID, err)
			return false
		}
	}
	committed, err := sess.End(r.ctx, kgo.TransactionEndTry(wantCommit))
	summary.Transactions++
	if err != nil {
		if r.ctx.Err() != nil {
			return true
		}
		r.errs.add("%s: ending a transaction (commit %v): %v", txnID, wantCommit, err)
		return false
	}
	switch {
	case committed:
		summary.Committed++
		r.commits.Add(1)
		r.account(txnID, polled)
	case !wantCommit:
		summary.Aborted++
		r.abortsChosen.Add(1)
		r.abortedFlushed.Add(int64(len(polled)))
	default:
		// GroupTransactSession aborted it: the group rebalanced since it began. End flushed
		// before it decided, so these records are in the log too.
		summary.Aborted++
		r.abortsRebalance.Add(1)
		r.abortedFlushed.Add(int64(len(polled)))
	}
	return true
}

// account records the input positions of a committed transaction; one already recorded is a
// duplicate: two transactions committed the same input.
func (r *etlRun) account(txnID string, polled []partOffset) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, po := range polled {
		if first, seen := r.committed[po]; seen {
			r.duplicates++
			r.errs.add("input %s/%d offset %d committed twice: by %s and by %s",
				r.cfg.input, po.partition, po.offset, first, txnID)
			continue
		}
		r.committed[po] = txnID
	}
	r.consumed += int64(len(polled))
	if r.consumed >= r.cfg.records {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

package main

// share mode: franz-go's share consumer (KIP-932, kgo.ShareGroup) reads a topic in a share
// group until it has seen --records distinct records or the deadline passes, accepting each
// record it gets (franz-go acknowledges the records of a poll on the next poll and on close).
// It reports every record it received as "partition:offset" with the times it got it, and the
// acknowledgement errors the broker answered, so a test can tell records delivered twice from
// records not read.

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

type shareConfig struct {
	common
	topic   string
	group   string
	records int
	members int
}

func (c *shareConfig) register(fs *flag.FlagSet) {
	c.common.register(fs)
	fs.StringVar(&c.topic, "topic", "", "the topic to read")
	fs.StringVar(&c.group, "group", "", "the share group")
	fs.IntVar(&c.records, "records", 0, "stop once this many distinct records were seen")
	fs.IntVar(&c.members, "members", 1, "share consumers in this process, one client each")
}

func shareMode(fs *flag.FlagSet, args []string) func() {
	cfg := &shareConfig{}
	cfg.register(fs)
	_ = fs.Parse(args)
	if cfg.topic == "" || cfg.group == "" || cfg.records <= 0 || cfg.members <= 0 {
		usage()
	}
	return func() { runShare(cfg) }
}

func runShare(cfg *shareConfig) {
	ctx, cancel, interrupted := cfg.runContext()
	defer cancel()
	var (
		mu       sync.Mutex
		got      = map[string]int{}
		byMember = make([]int, cfg.members)
		errs     errorLog
		wg       sync.WaitGroup
	)
	done, finish := context.WithCancel(ctx)
	defer finish()
	for m := 0; m < cfg.members; m++ {
		opts := append(cfg.clientOpts(fmt.Sprintf("share-%d", m)),
			kgo.ConsumeTopics(cfg.topic), kgo.ShareGroup(cfg.group),
			kgo.ShareAckCallback(func(_ *kgo.Client, results kgo.ShareAckResults) {
				if err := results.Error(); err != nil {
					errs.add("acknowledgement: %v", err)
				}
			}))
		client, err := kgo.NewClient(opts...)
		if err != nil {
			errs.add("client: %v", err)
			continue
		}
		wg.Add(1)
		go func(m int, client *kgo.Client) {
			defer wg.Done()
			defer client.Close() // acknowledges what the last poll returned
			for done.Err() == nil {
				fetches := client.PollFetches(done)
				for _, e := range fetches.Errors() {
					if done.Err() == nil {
						errs.add("fetch %s[%d]: %v", e.Topic, e.Partition, e.Err)
					}
				}
				mu.Lock()
				for _, r := range fetches.Records() {
					got[fmt.Sprintf("%d:%d", r.Partition, r.Offset)]++
					byMember[m]++
				}
				if len(got) >= cfg.records {
					finish()
				}
				mu.Unlock()
			}
		}(m, client)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	twice := []string{}
	for key, n := range got {
		if n > 1 {
			twice = append(twice, key)
		}
	}
	sort.Strings(twice)
	count, first := errs.snapshot()
	result := map[string]any{
		"distinct": len(got), "delivered_twice": twice, "by_member": byMember,
		"errors": first, "error_count": count, "interrupted": interrupted(),
	}
	report(result, len(got) >= cfg.records && !interrupted())
}

"""Transactions under faults, the short run of ``python -m bench txn-chaos`` (issue 28):
3 brokers, the topic and the transaction log RF 3 with ``min.insync.replicas`` 2,
transactional producers committing and aborting at random, read_committed consumers, and
each kind of fault once (the coordinator of a producer's transactional id and a partition's
leader, each SIGKILLed and SIGSTOPped); then a full restart, the final read and the
transactional checker's verdict (kafkube/harness/txn_checker.py). bench/txn_chaos.py describes it.

The seed is random unless KAFKUBE_TXN_CHAOS_SEED sets it; it is printed, and it repeats the
choices (kinds, targets, lengths, the transactions), not the timings."""

from __future__ import annotations

import os
import random
import time

import pytest

from bench.txn_chaos import KINDS, Plan, Run, headline
from bench.txn_workload import CLUSTER_CONFIG, Load
from kafkube.harness.metadata import Cluster


@pytest.mark.timeout(420)
def test_no_aborted_read_torn_or_lost_transaction_under_faults(cluster_factory):
    seed = int(os.environ.get("KAFKUBE_TXN_CHAOS_SEED") or random.randrange(2**32))
    print(f"seed {seed} (KAFKUBE_TXN_CHAOS_SEED reruns it)")
    cluster: Cluster = cluster_factory(3, CLUSTER_CONFIG)
    began = time.monotonic()
    # Each kind once, then two more, held 1-6 s: a pause past the 3 s session timeout
    # fences the broker, a shorter one does not; both are worth having.
    plan = Plan(minutes=0, faults=len(KINDS) + 2, seed=seed, hold=(1.0, 6.0), quiet_s=3.0)
    result = Run(cluster, plan, Load(seed)).go()
    lines = headline(result)
    print("\n".join(lines), f"\nwall time {time.monotonic() - began:.0f} s")
    evidence = "\n".join([*lines, *(f"{k}: {v}" for k, v in result["examples"].items()),
                          *result["client_notes"][-20:]])
    assert result["stopped"] is None, evidence
    assert result["anomalies"] == dict.fromkeys(result["anomalies"], 0), evidence
    assert result["ok"], evidence
    # The faults happened, each kind, and both outcomes did.
    counts = {k: v["count"] for k, v in result["kinds"].items()}
    assert sum(counts.values()) == plan.faults and min(counts.values()) >= 1, counts
    assert all(f["error"] is None and f["recovered_s"] is not None for f in result["faults"])
    assert result["transactions"]["committed"] >= 20, evidence
    assert result["transactions"]["aborted"] >= 10, evidence
    # Aborted records were on the log for the consumers to filter out, and what the
    # consumers read while it ran and the final read were both checked.
    assert result["records"]["aborted_delivered"] > 0, evidence
    assert result["records"]["polled"] > 0 and result["records"]["final"] > 0, evidence

"""The fault run of issue 27 (bench/chaos.py), short, on the suite's cluster: every kind of
fault once in a random order (seed KAFKUBE_CHAOS_SEED, printed), about three minutes of
them, under an acks=all idempotent producer. No acknowledged record may be lost or left
unread, none read twice or out of order, and the cluster must end whole and Ready. The long
run (`make chaos`, 30 minutes and 100 faults at least, rolls and scales between) has its
figures in docs/chaos.md."""

from __future__ import annotations

import os

from bench.chaos import Plan, Run, headline, table
from bench.chaos_faults import FAULTS, ON_NODES
from bench.scale.report import plain
from kafkube.harness.kind.operated import namespace_of
from kafkube.harness.kind.platform import Cluster

SEED = int(os.environ.get("KAFKUBE_CHAOS_SEED", "27"))


def test_a_fault_of_every_kind_loses_no_acknowledged_record(operator: Cluster) -> None:
    # No roll or scale here (the e2e operator scenarios have theirs): each costs minutes.
    plan = Plan(minutes=3, faults=len(FAULTS) + 1, seed=SEED, between_every=0,
                cap_minutes=8)
    with namespace_of(operator) as namespace:
        result = Run(operator, namespace, plan).go()
    print("\n".join(headline(result)) + "\n" + plain(table(result), right=(1, 2, 3, 4, 5, 6)))
    records = result["records"]
    assert records["lost"] == 0, records["lost_examples"]
    assert records["unread"] == 0, records["unread_examples"]
    # A producer that died (a client's fatal error) reports no totals: said before they are
    # compared, with the wedge (if any) that caused it.
    assert result["producer_error"] is None, (result["stopped"], result["producer_error"])
    assert records["acks_in_log"] == records["acked"] > 0
    assert records["duplicated"] == records["out_of_order"] == records["misplaced"] == 0
    assert not records["other_anomalies"], records["checker"]
    assert result["stopped"] is None, result["stopped"]
    assert result["ready_at_end"]
    expected = FAULTS if operator.name else tuple(k for k in FAULTS if k not in ON_NODES)
    assert set(expected) <= set(result["kinds"]), result["kinds"]
    failed = [f for f in result["faults"] if f["error"]]
    assert not failed, failed

"""The operator's Prometheus metrics (prometheus-client, as the brokers'): how often it
reconciles, how long a pass takes, what fails, and each action it takes."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("kafkube_operator_reconciles_total",
                     "Reconcile passes, by resource kind and result (ok, error).",
                     ["kind", "result"])
RECONCILE_SECONDS = Histogram("kafkube_operator_reconcile_duration_seconds",
                              "Duration of one reconcile pass.", ["kind"],
                              buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
ACTIONS = Counter("kafkube_operator_actions_total",
                  "Actions taken on the cluster, by reason (Created, Updated, Deleted, ...).",
                  ["reason"])
WARNINGS = Counter("kafkube_operator_warnings_total",
                   "Warnings reported on resources, by reason.", ["reason"])
LEADER = Gauge("kafkube_operator_leader", "1 while this replica holds the operator Lease.")

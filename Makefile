# The two commands of the README. Each sets up what it needs first (scripts/setup.sh is
# idempotent and caches under ~/.cache/kafkube): the demo only the local cluster's and the
# Spark job's needs, the tests everything (Kubernetes binaries, kind, the test clients).
.PHONY: demo test unit integration e2e setup setup-demo lint bench fuzz chaos txn-chaos

setup:
	bash scripts/setup.sh

setup-demo:
	bash scripts/setup.sh demo

demo: setup-demo
	.venv/bin/python scripts/demo.py

# Every tier: tests/unit and tests/integration on $(WORKERS) pytest-xdist workers (most of
# their time is spent waiting on broker processes, JVMs and the API server: 3 workers on 2
# cores took 21 min where one took 40; docs/platform.md; the tests that run Spark share one
# worker, `xdist_group("spark")`: two Spark JVMs at once took them past their timeouts in a
# cold run), then tests/e2e alone: its 4-node kind
# cluster loads the machine by itself. Its kind node image and this tree's images are built
# in the background meanwhile (scripts/setup.sh). The e2e tier runs even when the first run
# failed, so one CI run reports every failure; the exit status is the first failure's.
WORKERS ?= 3
test:
	KAFKUBE_KIND_BUILD=background bash scripts/setup.sh
	.venv/bin/ruff check .
	status=0; \
	.venv/bin/pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadgroup tests/unit tests/integration \
	  || status=$$?; \
	e2e=0; .venv/bin/pytest -q -p no:cacheprovider tests/e2e || e2e=$$?; \
	[ $$status -ne 0 ] || status=$$e2e; exit $$status

# One tier alone. The unit tier (tests/unit) starts no process and no server: it needs only
# the virtualenv, and takes seconds.
unit: setup-demo
	.venv/bin/pytest -q -p no:cacheprovider tests/unit

# Broker processes, the kube-apiserver, the Java and Go clients, Spark in local mode.
integration: setup
	.venv/bin/pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadgroup tests/integration

# Only the end-to-end scenarios on kind (tests/e2e); KAFKUBE_DRY_RUN=1 prints the commands.
e2e: setup
	.venv/bin/pytest -q -p no:cacheprovider -s tests/e2e

bench: setup
	.venv/bin/python -m bench all

fuzz: setup
	.venv/bin/python -m bench fuzz

# The long fault run of issue 27 on a kind cluster of its own: at least 30 minutes and 100
# faults under an acks=all producer, then every acknowledged record checked; the figures go
# into docs/chaos.md. Other sizes and seeds: .venv/bin/python -m bench chaos -h
chaos: setup
	.venv/bin/python -m bench chaos --minutes 30 --faults 100 --docs

# Transactions under faults (issue 28) on 3 local brokers: at least 10 minutes and 50 kills
# and pauses of transaction coordinators and partition leaders, then every transaction
# checked; the figures go into docs/transactions.md. Other sizes: python -m bench txn-chaos -h
txn-chaos: setup
	.venv/bin/python -m bench txn-chaos --minutes 10 --faults 50 --docs

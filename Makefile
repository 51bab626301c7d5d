# The two commands of the README. Each sets up what it needs first (scripts/setup.sh is
# idempotent and caches under ~/.cache/kafkube).
.PHONY: demo test setup lint bench fuzz

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/python scripts/demo.py

test: setup
	.venv/bin/ruff check .
	.venv/bin/pytest -q -p no:cacheprovider

bench: setup
	.venv/bin/python -m bench all

fuzz: setup
	.venv/bin/python -m bench fuzz

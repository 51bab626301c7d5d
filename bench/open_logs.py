"""``python -m bench open-logs``: what opening a new partition costs the broker's loop.

The replica manager opens a new replica by making its log (a directory and its first
segment) and its ``partition.metadata``; on a file system where a file creation costs
hundreds of microseconds of kernel time, that is most of the time a CreateTopics of
thousands of partitions takes to be served. This times ``--count`` of them in a row, in a
temporary directory under ``--dir`` (the file system the brokers' log dirs use), and says how
many files each left, so a change to what a new partition makes can be measured on its own.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from broker.server.replica_dirs import write_partition_metadata
from broker.storage.log import Log
from broker.storage.log_config import LogConfig


def open_new_logs(root: Path, count: int) -> float:
    """Seconds per new log, opened as the log manager opens one (and closed)."""
    config = LogConfig()
    logs = []
    started = time.perf_counter()
    for i in range(count):
        directory = root / f"open-logs-{i}"
        logs.append(Log(directory, config))
        write_partition_metadata(directory, "AAAAAAAAAAAAAAAAAAAAAA")
    seconds = (time.perf_counter() - started) / count
    for log in logs:
        log.close()
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench open-logs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000, help="new logs per run (3000)")
    parser.add_argument("--runs", type=int, default=3, help="runs (3)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the temporary directories go (the system's temp dir)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.runs < 1:
        parser.error("--count and --runs must be at least 1")
    each = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            each.append(open_new_logs(Path(tmp), args.count))
            files = sum(1 for p in Path(tmp).rglob("*") if p.is_file()) / args.count
        print(f"run {run + 1}: {each[-1] * 1e6:,.0f} us per new log, {files:g} files each",
              flush=True)
    print(f"median of {args.runs}: {statistics.median(each) * 1e6:,.0f} us per new log")
    return 0

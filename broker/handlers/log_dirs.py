"""DescribeLogDirs: the broker's log directories, their space, and the partitions in each.

What Kafka's ReplicaManager.describeLogDirs answers: for every log dir its absolute path,
total and usable bytes (v4+), and for each hosted partition of the requested topics (all
of them when the request names none) its size on disk and how far its log end is behind
its high watermark. A requested partition this broker does not host is simply absent, as in
Kafka: the admin client asks every broker and merges the answers. An offline log dir (its
disk failed, KIP-112) is listed with KAFKA_STORAGE_ERROR and nothing in it, as Kafka lists
one. It needs DESCRIBE on the
cluster: without it the answer is CLUSTER_AUTHORIZATION_FAILED (v3+) and no log dirs.
"""

from __future__ import annotations

import os
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers import handles
from broker.handlers.context import RequestContext
from broker.protocol.messages import build_response
from broker.security.acl import Operation


def _wanted(request: Any) -> dict[str, set[int]] | None:
    if request.topics is None:
        return None
    wanted: dict[str, set[int]] = defaultdict(set)
    for topic in request.topics:
        wanted[topic.topic].update(topic.partitions)
    return wanted


def _space(log_dir: Path) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``log_dir``; -1s if unreadable."""
    try:
        stats = os.statvfs(log_dir)
    except OSError:
        return -1, -1
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


@handles(35, 1, 5)
async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return build_response(request, {"throttle_time": timedelta(0), "results": [],
                                        "error_code": ErrorCode.cluster_authorization_failed})
    replicas = ctx.services.replicas
    wanted = _wanted(request)
    by_dir: dict[Path, dict[str, list[dict[str, Any]]]] = {d: defaultdict(list)
                                                           for d in replicas.log_dirs}
    for tp, partition in sorted(replicas.partitions.items()):
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        log = partition.log
        by_dir.setdefault(log.dir.parent, defaultdict(list))[tp.topic].append({
            "partition_index": tp.partition,
            "partition_size": log.size_bytes,
            "offset_lag": max(partition.high_watermark - log.log_end_offset, 0),
            "is_future_key": False,
        })
    results = []
    offline = replicas.logs.failures.offline
    for log_dir, topics in by_dir.items():
        if log_dir in offline:
            results.append({"error_code": ErrorCode.kafka_storage_error,
                            "log_dir": str(log_dir.absolute()), "topics": [],
                            "total_bytes": -1, "usable_bytes": -1, "is_cordoned": False})
            continue
        total, usable = _space(log_dir)
        results.append({
            "error_code": ErrorCode.none,
            "log_dir": str(log_dir.resolve()),
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
            "total_bytes": total,
            "usable_bytes": usable,
            "is_cordoned": False,
        })
    return build_response(request, {"throttle_time": timedelta(0), "error_code": ErrorCode.none,
                                    "results": results})

"""``/ready``: whether this broker holds what it should, for a Kubernetes readiness probe.

A broker that listens is not yet one that may be taken down next: after a restart it
catches up as a follower, and a node drain that evicted the next broker meanwhile would take
partitions below min.insync.replicas. So the broker is ready once it is registered and back
in the ISR of every partition it follows whose leader is alive (a partition without one has
nothing to catch up from); the PodDisruptionBudget (maxUnavailable 1) then lets ``kubectl
drain`` evict one broker at a time, each only after the last is back in its ISRs.

The answer is computed on the event loop (``Readiness.judge``) and read by the HTTP thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from broker.cluster.image import ClusterImage
from kafkube_contract.image import NO_LEADER

log = logging.getLogger(__name__)


def behind(image: ClusterImage, node_id: int, hosted: Iterable[tuple[str, int]],
           live: Iterable[int]) -> list[str]:
    """The partitions this broker should replicate and does not yet, as ``topic-N``: not
    opened yet, or followed and outside the ISR while the leader is alive."""
    hosted, live = set(hosted), set(live)
    late = []
    for name, topic in image.topics.items():
        for index, state in enumerate(topic.assignments):
            if node_id not in state.replicas or node_id in state.removing:
                continue
            following = state.leader not in (NO_LEADER, node_id) and state.leader in live
            if (name, index) not in hosted or (following and node_id not in state.isr):
                late.append(f"{name}-{index}")
    return late


class Readiness:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = (False, "starting")
        self._server: ThreadingHTTPServer | None = None

    def set(self, ready: bool, reason: str) -> None:
        with self._lock:
            if (ready, reason) != self._state and not ready:
                log.debug("not ready: %s", reason)
            self._state = (ready, reason)

    def judge(self, registered: bool, late: list[str]) -> None:
        if not registered:
            self.set(False, "not registered with the cluster")
        elif late:
            self.set(False, f"{len(late)} partition(s) not in sync yet: "
                     + ", ".join(sorted(late)[:10]) + (" ..." if len(late) > 10 else ""))
        else:
            self.set(True, "in the ISR of every partition it follows")

    @property
    def state(self) -> tuple[bool, str]:
        with self._lock:
            return self._state

    def serve(self, host: str, port: int) -> int:
        """Answer ``GET /ready`` (200 or 503, with the reason) on a daemon thread."""
        readiness = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                ready, reason = readiness.state
                if path == "/healthz":  # the process answers: alive
                    code, reason = 200, "alive"
                elif path == "/ready":
                    code = 200 if ready else 503
                else:
                    code, reason = 404, "not found"
                body = (reason + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # probes every few seconds: quiet
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=self._server.serve_forever, name="health", daemon=True).start()
        return self._server.server_address[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

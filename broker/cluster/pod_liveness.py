"""Fencing a broker as soon as its pod shows it dead, before its lease runs out.

A lease proves a broker alive only by its absence of renewals, so a crashed broker keeps its
partitions unavailable for ``broker.session.timeout.ms``. On Kubernetes the kubelet reports a
container's end within about a second (its pod lifecycle event generator relists every
second), so the Pod is a faster witness: every broker watches its cluster's pods, and a
broker whose registering process is seen to have ended counts as dead from then on, exactly as
if its lease had lapsed (the controller moves its leadership and ISR places; the broker, if it
somehow still runs, finds its renewals refused and registers again with a new epoch).

Only evidence that the very process that registered is gone counts, never a pod merely
looking unhealthy: a readiness probe failing, a pod being deleted gracefully (its broker is
doing a controlled shutdown, which moves leadership more gently) or a pod missing from the
list (a label typo would otherwise fence every broker forever).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

DEFAULT_CONTAINER = "broker"


@dataclass(frozen=True, slots=True)
class PodRef:
    """The pod and container a broker process runs in, from the downward API."""

    name: str
    uid: str
    container: str = DEFAULT_CONTAINER


def _ms(value: dt.datetime | None) -> int | None:
    return int(value.timestamp() * 1000) if value is not None else None


def process_ended(ref: PodRef, registered_ms: int, pod: Any | None,
                  gone_uid: str | None) -> str | None:
    """Why the process that registered at ``registered_ms`` from pod ``ref`` is known to have
    ended, or None while nothing shows it.

    ``pod`` is the pod of that name as the watch holds it, ``gone_uid`` the uid of the last
    pod of that name seen deleted. A container's ``finishedAt`` has whole seconds and is
    truncated, so an end within the same second as the registration cannot be told from one
    before it and is left to the lease."""
    if gone_uid == ref.uid and (pod is None or pod.metadata.uid != ref.uid):
        return f"pod {ref.name} was deleted"
    if pod is None:
        return None
    if pod.metadata.uid != ref.uid:
        return f"pod {ref.name} was replaced (uid {pod.metadata.uid})"
    status = pod.status
    if status is None:
        return None
    if status.phase in ("Failed", "Succeeded"):
        return f"pod {ref.name} is {status.phase}" + (f" ({status.reason})" if status.reason
                                                       else "")
    for container in status.container_statuses or []:
        if container.name != ref.container:
            continue
        for when, state in (("now", container.state), ("before", container.last_state)):
            ended = state.terminated if state is not None else None
            finished = _ms(ended.finished_at) if ended is not None else None
            if finished is not None and finished >= registered_ms:
                restart = "" if when == "now" else f", restarted {container.restart_count} times"
                return (f"container {ref.container} of pod {ref.name} ended at "
                        f"{ended.finished_at:%H:%M:%S} with exit code {ended.exit_code}"
                        f" ({ended.reason}{restart})")
    return None

"""``kafkube operator``: wait to be the active replica, then run the kopf handlers until the
operator Lease is lost or the process is told to stop."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass

import kopf
from prometheus_client import start_http_server

from kafkube_operator import handlers, metrics
from kafkube_operator.kafka import AdminClients
from kafkube_operator.kube import Kube
from kafkube_operator.leadership import Leadership, lease_namespace
from kafkube_operator.reconcile.security import admin_security
from kafkube_operator.reconcile.views import ClusterViews

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorOptions:
    kubeconfig: str | None = None
    namespaces: tuple[str, ...] = ()  # none: every namespace
    lease_namespace: str | None = None  # default: the pod's own, else an existing one
    identity: str | None = None  # default: the pod's name, else host and pid
    metrics_port: int = 8080  # -1: off
    lease_duration_s: int = 15


def _pod_namespace() -> str | None:
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return os.environ.get("POD_NAMESPACE")


def run(options: OperatorOptions) -> int:
    if options.metrics_port >= 0:
        start_http_server(options.metrics_port)
    # kafka-python logs every connection at INFO; the operator's own log says what it does.
    logging.getLogger("kafka").setLevel(logging.WARNING)
    kube = Kube.connect(options.kubeconfig)
    identity = options.identity or os.environ.get("POD_NAME") \
        or f"{socket.gethostname()}-{os.getpid()}"
    leadership = Leadership(
        kube.api, options.lease_namespace or lease_namespace(kube.api, _pod_namespace()),
        identity, duration_s=options.lease_duration_s)
    stop = threading.Event()  # kopf's: stop reconciling
    renewing = threading.Event()  # set once kopf stopped: the Lease is released then
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if not leadership.wait_until_leader(stop):
        return 0
    metrics.LEADER.set(1)
    log.info("operator %s active (lease %s/%s)", identity, leadership.namespace, leadership.name)

    def on_lost() -> None:
        # Past the renew deadline another replica may take the Lease: end the process now,
        # passes in flight included, as controller-runtime does (Kubernetes restarts it).
        metrics.LEADER.set(0)
        logging.shutdown()
        os._exit(1)

    leadership.keep(renewing, on_lost)
    kube.fence = leadership.check
    admins = AdminClients(admin_security(kube))
    admins.fence = leadership.check
    views = ClusterViews.create(options.kubeconfig)
    memo = kopf.Memo(context=handlers.OperatorContext(kube, views, admins))

    async def operate() -> None:
        try:
            await kopf.operator(
                clusterwide=not options.namespaces, namespaces=list(options.namespaces),
                standalone=True, memo=memo, stop_flag=stop)
        finally:
            # kopf stops on SIGTERM by itself; its thread waiting on ``stop`` must end too,
            # or asyncio.run waits for it forever.
            stop.set()

    try:
        asyncio.run(operate())
    finally:
        stop.set()
        renewing.set()  # kopf has stopped: no pass of ours runs any more
        leadership.release()
        metrics.LEADER.set(0)
        views.close()
        memo.context.admins.close()
        kube.close()
    return 0

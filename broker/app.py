"""Wiring: build the layers of one broker from its config, run them, stop them cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path

from prometheus_client import start_http_server

from broker import handlers
from broker.cluster.backend import CoordinationBackend
from broker.cluster.features import SUPPORTED
from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ClusterMetadata
from broker.cluster.pod_liveness import DEFAULT_CONTAINER, PodRef
from broker.cluster.sqlite import SqliteBackend
from broker.common.heap import LongLivedObjects
from broker.common.limits import raise_open_files_limit
from broker.common.metrics import BrokerMetrics, PartitionSample, ReplicationSample
from broker.common.repeated_failure import RepeatedFailure
from broker.common.watchdog import EventLoopWatchdog, GcPauses
from broker.config.broker_config import BrokerConfig
from broker.config.group_settings import GroupSettings
from broker.config.listeners import listener_plan, parse_listener
from broker.controller.controller import Controller
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.coordinator.share_coordinator import ShareCoordinator
from broker.coordinator.transaction_coordinator import TransactionCoordinator
from broker.coordinator.txn_end import TV2
from broker.coordinator.txn_markers import MarkerSender
from broker.frontend.socket_server import KafkaServer
from broker.handlers.context import BrokerServices, Endpoint
from broker.health import Readiness, behind
from broker.network.peers import PeerChannels
from broker.security import acl
from broker.security.client import inter_broker_security
from broker.security.scram import MECHANISMS, ScramCredential, new_credential
from broker.security.scram import matches as scram_matches
from broker.security.session import ListenerSecurity
from broker.server.broker_lifecycle import Membership
from broker.server.dynamic_config import follow_dynamic_configs
from broker.server.fetch_session import FetchSessionCache
from broker.server.handover import hand_over
from broker.server.replica_manager import ReplicaManager
from broker.server.txn_verification import TransactionVerifier
from broker.share.persister import SharePersister
from broker.share.share_partitions import SharePartitionManager
from broker.share.share_sessions import ShareSessions
from broker.storage.log_dir_lock import LogDirLocks
from kafkube_contract.registration import BrokerRegistration, feature_tuples

log = logging.getLogger(__name__)

METADATA_POLL_SECONDS = 0.1
STOP_TIMEOUT_SECONDS = 20.0
COORDINATION_FILE = "cluster.db"


SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def open_backend(config: BrokerConfig) -> CoordinationBackend:
    """The configured coordination backend (``kafkube.coordination.backend``)."""
    if config["kafkube.coordination.backend"] != "kubernetes":
        return SqliteBackend(coordination_path(config))
    from broker.cluster.kubernetes import KubernetesBackend, KubernetesSettings

    namespace = config["kafkube.kubernetes.namespace"]
    if not namespace and SERVICE_ACCOUNT_NAMESPACE.exists():
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    namespace = namespace or os.environ.get("POD_NAMESPACE") or "default"
    return KubernetesBackend(KubernetesSettings(
        namespace, config["kafkube.cluster.name"], config["kafkube.kubernetes.kubeconfig"],
        pod_ref(os.environ)))


def pod_ref(env: Mapping[str, str]) -> PodRef | None:
    """The pod this broker runs in, when the downward API says so (POD_NAME and POD_UID;
    KAFKUBE_CONTAINER_NAME names the broker's container if it is not ``broker``)."""
    if not env.get("POD_NAME") or not env.get("POD_UID"):
        return None
    return PodRef(env["POD_NAME"], env["POD_UID"],
                  env.get("KAFKUBE_CONTAINER_NAME") or DEFAULT_CONTAINER)


def coordination_path(config: BrokerConfig) -> Path:
    """The embedded backend's file: shared by a local cluster, else in the first log dir."""
    path = config["kafkube.coordination.path"]
    return Path(path) if path else Path(config.log_dirs[0]) / COORDINATION_FILE


class BrokerApp:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        handlers.load_all()
        log_dirs = [Path(d) for d in config.log_dirs]
        # Before anything reads them: a predecessor still stopping (a force-deleted pod)
        # must not write the same logs (broker/storage/log_dir_lock.py).
        self.log_dir_locks = LogDirLocks()
        self.log_dir_locks.acquire(log_dirs)
        # Waits here, saying why, while the store holds no image this broker may trust.
        self.store = ClusterMetadata(open_backend(config), log_dirs, config.node_id)
        self.backend = self.store.backend
        follow_dynamic_configs(config, self.store)
        self.listener_plan = listener_plan(config)
        # Built before anything starts: a listener it could not serve stops the broker here.
        self.listener_security = [ListenerSecurity(config, listener, self._scram_credential)
                                  for listener in self.listener_plan.listeners]
        peer_security = inter_broker_security(config, self.listener_plan)
        peer_listener = self.listener_plan.inter_broker
        self.replicas = ReplicaManager(config, self.store, peer_security, peer_listener)
        # A group's own configs (kafka-configs.sh --entity-type groups) over the broker's.
        group_settings = GroupSettings(
            config, lambda group: self.store.image.group_configs.get(group, {}))
        self.groups = GroupCoordinator(config, self.replicas, group_settings)
        request_timeout = config["request.timeout.ms"] / 1000
        self.transactions = TransactionCoordinator(
            config, self.replicas, self.store,
            MarkerSender(self.store, PeerChannels(
                self.store, f"txn-markers-{config.node_id}", request_timeout, peer_security,
                peer_listener)))
        self.verifier = TransactionVerifier(
            self.store, config.node_id, config["transaction.state.log.num.partitions"],
            PeerChannels(self.store, f"txn-verification-{config.node_id}", request_timeout,
                         peer_security, peer_listener),
            self.transactions.verify_partitions,
            functools.partial(self.transactions.add_partitions, client_version=TV2),
            config["add.partitions.to.txn.retry.backoff.ms"],
            config["add.partitions.to.txn.retry.backoff.max.ms"])
        self.share_coordinator = ShareCoordinator(config, self.replicas)
        self.shares = SharePartitionManager(config, self.replicas, SharePersister(
            self.share_coordinator, self.store, PeerChannels(
                self.store, f"share-state-{config.node_id}", request_timeout, peer_security,
                peer_listener)), group_settings)
        # A share group's member left or expired: what it holds here goes back at once.
        self.groups.shares.on_member_left = self.shares.release_later
        self._share_expiry: asyncio.Task[None] | None = None
        self.membership: Membership | None = None
        self.controller = Controller(config, self.store, self._broker_epoch)
        self._metadata_task: asyncio.Task[None] | None = None
        self.metrics = BrokerMetrics()
        self.metrics.watch_logs(self._sample_logs)
        self.metrics.watch_groups(lambda: list(self.groups.lag()))
        self.metrics.watch_consumer_groups(self.groups.consumer_group_samples)
        self.metrics.watch_share_groups(self.shares.samples)
        self.metrics.watch_replication(self._sample_replication)
        failures = self.replicas.logs.failures
        self.metrics.watch_log_dirs(lambda: len(failures.offline),
                                    lambda: failures.refused_for_files)
        self.servers: list[KafkaServer] = []
        self.metrics_port: int | None = None
        self.watchdog = EventLoopWatchdog(
            config["kafkube.event.loop.stall.warn.ms"] / 1000, self.metrics.registry)
        self.gc_pauses = GcPauses(self.metrics.registry)
        self.long_lived = LongLivedObjects(lambda: self.replicas.opened_or_dropped)
        self._stopped = asyncio.Event()
        self.storage_failed = False
        self._reporting: asyncio.Task[None] | None = None
        self.replicas.on_offline.append(self._log_dir_failed)
        self.store.offline_dirs = self.replicas.logs.failures.offline
        self.readiness = Readiness()
        self.health_port: int | None = None
        self._judged_at = 0.0

    def _sample_logs(self) -> Iterator[PartitionSample]:
        for tp, p in list(self.replicas.partitions.items()):
            log_ = p.log
            yield PartitionSample(
                tp.topic, tp.partition, log_.size_bytes, log_.log_start_offset,
                log_.log_end_offset, p.high_watermark, len(log_.segments),
                p.leader_bytes_in, p.leader_bytes_out,
            )

    def _offline_dirs(self) -> tuple[str, ...]:
        return tuple(str(d) for d in self.replicas.logs.failures.offline)

    def _log_dir_failed(self) -> None:
        """A log dir went offline (the replica manager has stopped serving its replicas):
        tell the controller through the registration; with no dir left, stop, as Kafka
        halts a broker whose every log dir failed."""
        if not self.replicas.logs.online_dirs:
            log.error("every log dir is offline: stopping the broker")
            self.storage_failed = True
            self._stopped.set()
            return
        if self.membership is not None:
            self._reporting = asyncio.create_task(self.membership.report_offline(
                self._offline_dirs(), self.replicas.offline_replicas()))

    def _broker_epoch(self) -> int:
        return self.membership.broker_epoch if self.membership else -1

    def _sample_replication(self) -> ReplicationSample:
        partitions = list(self.replicas.partitions.values())
        led = [p for p in partitions if p.is_leader]
        offline = 0
        if self.controller.active:
            offline = sum(1 for t in self.store.image.topics.values()
                          for s in t.assignments if s.leader < 0)
        under_min = sum(1 for p in led if len(p.isr) < p.log.config.min_insync_replicas)
        return ReplicationSample(
            partitions=len(partitions), leaders=len(led),
            under_replicated=sum(1 for p in led if len(p.isr) < len(p.replicas)),
            under_min_isr=under_min, offline=offline,
            active_controller=self.controller.active,
            isr_shrinks=self.replicas.isr_changes.shrinks,
            isr_expands=self.replicas.isr_changes.expands,
            leader_elections=self.controller.elections,
            producer_ids=self.replicas.producer_id_count(),
        )

    async def start(self) -> None:
        self.watchdog.start()
        self.gc_pauses.start()
        self.replicas.load()
        fetch_sessions = FetchSessionCache(
            self.config["max.incremental.fetch.session.cache.slots"])
        self.metrics.watch_fetch_sessions(lambda: len(fetch_sessions))
        services = BrokerServices(
            self.config, self.store, self.replicas, self.metrics, {}, self.groups,
            self.controller, self.transactions, self.verifier,
            acl.from_config(self.config, lambda: self.store.image.acls), fetch_sessions,
            self.shares, self.share_coordinator,
            ShareSessions(self.config["group.share.max.share.sessions"]),
        )
        for security in self.listener_security:
            server = KafkaServer(services, security)
            await server.start()
            self.servers.append(server)
        rack = self.config["broker.rack"]
        for server in self.servers:  # a listener not advertised: its own address
            services.advertised[server.security.listener.name] = Endpoint(
                server.host, server.port, rack)
        for adv in self.listener_plan.advertised:
            # Listening on port 0 and advertising nothing else: the port the kernel picked.
            port = (adv.port if self.config["advertised.listeners"]
                    else services.advertised[adv.listener].port)
            services.advertised[adv.listener] = Endpoint(adv.host, port, rack)
        inter_broker = services.advertised[self.listener_plan.inter_broker]
        # Before registering: the registration names the metrics port (the operator reads the
        # partitions' rates there to balance the cluster).
        metrics_port = self.config["kafkube.metrics.port"]
        if metrics_port >= 0:
            host = parse_listener(self.config.listeners[0])[1] or "0.0.0.0"
            httpd, _ = start_http_server(metrics_port, addr=host, registry=self.metrics.registry)
            self.metrics_port = httpd.server_port
            self._httpd = httpd
        self.membership = Membership(
            self.store,
            BrokerRegistration(
                self.config.node_id, inter_broker.host or "127.0.0.1", inter_broker.port, rack,
                listeners=",".join(f"{name}://{e.host or '127.0.0.1'}:{e.port}"
                                   for name, e in services.advertised.items()),
                offline_log_dirs=self._offline_dirs(),
                offline_replicas=self.replicas.offline_replicas(),
                metrics_port=self.metrics_port or 0,
                supported_features=feature_tuples(SUPPORTED)),
            self.config["broker.session.timeout.ms"],
            self.config["broker.heartbeat.interval.ms"],
        )
        self.replicas.leadership_listeners.append(self.groups.on_leadership)
        self.replicas.leadership_listeners.append(self.transactions.on_leadership)
        self.replicas.leadership_listeners.append(self.share_coordinator.on_leadership)
        self.replicas.leadership_listeners.append(self.shares.on_leadership)
        await self._ensure_own_scram_credential()
        # Step out of roles another in-sync replica can take before taking any role: a
        # restarted broker must not lead, even for a moment, what it may not fully hold.
        await self.membership.join()
        self.store.refresh()
        self.replicas.apply_image(self.store.image)
        await self.store.keep_copy(force=True)
        self.replicas.start_background_tasks()
        self.groups.start()
        self.transactions.start()
        self._share_expiry = asyncio.create_task(self.shares.run_expiry(services.share_sessions))
        self.controller.start()
        self._metadata_task = asyncio.create_task(self._follow_metadata())
        health_port = self.config["kafkube.health.port"]
        if health_port >= 0:
            host = parse_listener(self.config.listeners[0])[1] or "0.0.0.0"
            self.health_port = self.readiness.serve(host, health_port)
        log.info("broker %d started", self.config.node_id)

    def bound_listeners(self) -> list[str]:
        return [f"{s.security.listener.name}://{s.host}:{s.port}" for s in self.servers]

    async def _ensure_own_scram_credential(self) -> None:
        """With SCRAM between brokers, the credential this broker logs in with must be in
        the cluster metadata before any peer can check it. Kafka has it added when storage
        is formatted (kafka-storage format --add-scram); here each broker adds its own from
        its sasl.jaas.config if it is missing, and says so if a different one is there."""
        security = self.replicas.fetcher_config.security
        mechanism = security.mechanism
        if mechanism is None or mechanism not in MECHANISMS:
            return
        user, password = security.username, security.password

        def add(image: ClusterImage) -> ClusterImage | None:
            if mechanism in image.scram_credentials.get(user, {}):
                return None
            return image.with_scram_credential(user, mechanism, new_credential(mechanism,
                                                                               password))

        image = await self.store.update(add)
        if not scram_matches(image.scram_credentials[user][mechanism], mechanism, password):
            log.error("the cluster's %s credential of user %s is not the password in this "
                      "broker's sasl.jaas.config: other brokers will refuse this one",
                      mechanism, user)

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.store.image.scram_credentials.get(user, {}).get(mechanism)

    async def _follow_metadata(self) -> None:
        """Renew the liveness lease and take up image changes, as KRaft brokers follow the
        metadata log: at once when the backend watches, else by polling every 100 ms."""
        assert self.membership is not None
        heartbeat = self.config["broker.heartbeat.interval.ms"] / 1000
        next_heartbeat = 0.0
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()
        pause = METADATA_POLL_SECONDS
        if self.backend.notifies_changes:
            self.backend.add_listener(lambda: loop.call_soon_threadsafe(changed.set))
            pause = heartbeat
        failures = RepeatedFailure(log, "following the cluster metadata")
        while True:
            changed.clear()
            try:
                if loop.time() >= next_heartbeat:
                    next_heartbeat = loop.time() + heartbeat
                    await self.membership.heartbeat()
                self.store.refresh()  # the replica manager follows every new image
                await self.store.repair()
                await self.store.keep_copy()
                self._judge_readiness(loop.time())
                failures.succeeded()
            except Exception as e:
                failures.failed(e)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(pause, max(0.0, next_heartbeat - loop.time()))):
                    await changed.wait()

    def _judge_readiness(self, now: float) -> None:
        """At most once a second (it walks every partition): /ready's answer."""
        if self.health_port is None or now - self._judged_at < 1.0:
            return
        self._judged_at = now
        registered = self.membership is not None and self.membership.broker_epoch >= 0 \
            and not self._stopped.is_set()
        self.readiness.judge(registered, behind(
            self.store.image, self.config.node_id, self.replicas.partitions,
            self.store.brokers))

    async def controlled_shutdown(self) -> None:
        """Move leadership to other in-sync replicas before stopping (KIP-143's purpose),
        only to those seen alive and caught up just now (``Handover``)."""
        if self.membership is None or not self.config["controlled.shutdown.enable"]:
            return
        await self.controller.stop()
        # Long enough for a live follower's next fetch after a long poll or an error backoff.
        wait_ms = 2 * self.config["replica.fetch.wait.max.ms"] + self.config[
            "replica.fetch.backoff.ms"]
        try:
            handover = await hand_over(self.replicas, wait_ms / 1000)
            await self.replicas.stop_all_fetchers()
            await self.membership.leave_roles(handover)
        except Exception:
            log.exception("controlled shutdown could not move leadership")

    async def stop(self) -> None:
        self.readiness.set(False, "stopping")
        await self.controlled_shutdown()
        if self._metadata_task is not None:
            self._metadata_task.cancel()
        await self.controller.stop()
        for server in self.servers:
            await server.stop()
        await self.groups.stop()
        await self.transactions.stop()
        if self._share_expiry is not None:
            self._share_expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._share_expiry
        await self.replicas.shutdown()
        if self.membership is not None:
            await self.membership.leave()
        await self.store.keep_copy(force=True)
        self.store.close()
        # The log dir locks are not released here: worker threads (the cleaner's, a
        # to_thread write) may still touch the dirs until the process ends, which frees them.
        await self.watchdog.stop()
        await self.long_lived.stop()
        self.gc_pauses.stop()
        if self.metrics_port is not None:
            self._httpd.shutdown()
        self.readiness.stop()
        log.info("broker %d stopped cleanly", self.config.node_id)

    async def run_until_signalled(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stopped.set)
        await self.start()
        # Everything built so far (modules, kio's thousands of schema classes, the logs
        # loaded at start) lives as long as the broker. Frozen, it is no longer walked by
        # each full collection, which took 30-43 ms on the loop, the p99.9 of a producer's
        # end-to-end latency at 5 MB/s (docs/performance.md, "Garbage collection pauses").
        gc.freeze()
        self.long_lived.start()  # and again whenever the hosted partitions have changed
        metrics = f", metrics on http://*:{self.metrics_port}/metrics" if self.metrics_port else ""
        if self.health_port is not None:
            metrics += f", health on http://*:{self.health_port}/ready"
        # Tests and scripts wait for this line: it means the broker accepts connections.
        print(f"kafkube broker {self.config.node_id} listening on "
              f"{', '.join(self.bound_listeners())}{metrics}", flush=True)
        await self._stopped.wait()
        try:
            async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
                await self.stop()
        except TimeoutError:
            # Never hang on the way out: say what was stuck, then exit non-zero.
            for task in asyncio.all_tasks():
                log.error("still running at shutdown: %s", task)
                for frame in task.get_stack():
                    log.error("    %s:%d %s", frame.f_code.co_filename, frame.f_lineno,
                              frame.f_code.co_name)
            raise SystemExit(f"broker {self.config.node_id} did not stop within "
                             f"{STOP_TIMEOUT_SECONDS}s") from None
        if self.storage_failed:
            raise SystemExit(f"broker {self.config.node_id} stopped: every log dir is offline")


def run(config: BrokerConfig) -> None:
    raise_open_files_limit()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        uvloop = None
    runner = uvloop.run if uvloop else asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(BrokerApp(config).run_until_signalled())

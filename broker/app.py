"""Wiring: build the layers of one broker from its config, run them, stop them cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import start_http_server

from broker import handlers
from broker.config import BrokerConfig, parse_listener
from broker.coordinator.group_coordinator import GroupCoordinator
from broker.handlers.context import BrokerServices, Endpoint
from broker.metrics import BrokerMetrics, PartitionSample
from broker.network.server import KafkaServer
from broker.server.metadata import LocalMetadataStore
from broker.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class BrokerApp:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        handlers.load_all()
        self.store = LocalMetadataStore([Path(d) for d in config.log_dirs], config.node_id)
        self.replicas = ReplicaManager(config, self.store)
        self.groups = GroupCoordinator(config, self.replicas)
        self.metrics = BrokerMetrics()
        self.metrics.watch_logs(self._sample_logs)
        self.metrics.watch_groups(lambda: list(self.groups.lag()))
        self.servers: list[KafkaServer] = []
        self.metrics_port: int | None = None
        self._stopped = asyncio.Event()

    def _sample_logs(self) -> Iterator[PartitionSample]:
        for tp, p in list(self.replicas.partitions.items()):
            log_ = p.log
            yield PartitionSample(
                tp.topic, tp.partition, log_.size_bytes, log_.log_start_offset,
                log_.log_end_offset, p.high_watermark, len(log_.segments),
            )

    async def start(self) -> None:
        self.replicas.load()
        self.groups.load()
        _, adv_host, adv_port = parse_listener(self.config.advertised_listeners[0])
        services = BrokerServices(
            self.config, self.store, self.replicas, self.metrics,
            Endpoint(adv_host, adv_port, self.config["broker.rack"]), self.groups,
        )
        for listener in self.config.listeners:
            _, host, port = parse_listener(listener)
            server = KafkaServer(services, host, port)
            await server.start()
            self.servers.append(server)
        if self.config["advertised.listeners"] is None:
            # Listening on port 0: advertise the port the kernel picked.
            services.advertised = Endpoint(
                adv_host, self.servers[0].port, self.config["broker.rack"]
            )
        self.replicas.start_background_tasks()
        self.groups.start()
        metrics_port = self.config["kafkube.metrics.port"]
        if metrics_port >= 0:
            host = parse_listener(self.config.listeners[0])[1] or "0.0.0.0"
            httpd, _ = start_http_server(metrics_port, addr=host, registry=self.metrics.registry)
            self.metrics_port = httpd.server_port
            self._httpd = httpd
        log.info("broker %d started", self.config.node_id)

    def bound_listeners(self) -> list[str]:
        return [f"PLAINTEXT://{s.host}:{s.port}" for s in self.servers]

    async def stop(self) -> None:
        for server in self.servers:
            await server.stop()
        await self.groups.stop()
        await self.replicas.shutdown()
        if self.metrics_port is not None:
            self._httpd.shutdown()
        log.info("broker %d stopped cleanly", self.config.node_id)

    async def run_until_signalled(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stopped.set)
        await self.start()
        metrics = f", metrics on http://*:{self.metrics_port}/metrics" if self.metrics_port else ""
        # Tests and scripts wait for this line: it means the broker accepts connections.
        print(f"kafkube broker {self.config.node_id} listening on "
              f"{', '.join(self.bound_listeners())}{metrics}", flush=True)
        await self._stopped.wait()
        await self.stop()


def run(config: BrokerConfig) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        uvloop = None
    runner = uvloop.run if uvloop else asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(BrokerApp(config).run_until_signalled())

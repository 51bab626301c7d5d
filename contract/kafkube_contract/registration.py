"""A broker registration and the controller's lease, as values: what a broker announces of
itself when it joins (kept in its Lease, ``kafkube_contract.objects``), read by its peers and
its clients' Metadata through the broker, and by the operator to reach the cluster."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker. ``host``/``port`` is its inter-broker listener (what peers dial);
    ``listeners`` every advertised listener as ``NAME://host:port,...`` (Kafka's
    advertised.listeners), so clients get the addresses of the listener they came in on.

    ``offline_log_dirs`` are the broker's log dirs that failed (KIP-112/KIP-858's offline
    dirs, as a KRaft broker sends them in its registration and heartbeats), and
    ``offline_replicas`` the replicas they held, as ``replica_key``s. KRaft's controller
    knows each replica's dir from the metadata (AssignReplicasToDirs); kafkube's image does
    not record dirs, so the broker names the replicas itself, and the controller treats
    each as it treats a replica of a dead broker: out of the ISR, never elected. Both
    change while the broker runs (``CoordinationBackend.update_registration``)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    broker_epoch: int = -1
    listeners: str = ""
    offline_log_dirs: tuple[str, ...] = ()
    offline_replicas: frozenset[str] = frozenset()
    # The port of its Prometheus /metrics on ``host`` (0: none or not said, as an older
    # broker registers): where the operator reads the partitions' rates.
    metrics_port: int = 0
    # The levels of each finalized feature this broker's kafkube can run at, as
    # (name, lowest, highest) sorted by name (Kafka's BrokerRegistrationRequest Features):
    # what a raise of a level is checked against (kafkube_contract/features.py). Empty: an
    # older broker that announces none.
    supported_features: tuple[tuple[str, int, int], ...] = ()

    @property
    def feature_ranges(self) -> dict[str, tuple[int, int]]:
        return {name: (low, high) for name, low, high in self.supported_features}

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """The broker's address on ``listener``; a broker registered without listeners
        (an older one) has its one address on every listener."""
        if not self.listeners:
            return self.host, self.port
        for uri in self.listeners.split(","):
            name, _, address = uri.partition("://")
            if name == listener:
                host, _, port = address.rpartition(":")
                return host.strip("[]"), int(port)
        return None

    def on_listener(self, listener: str | None) -> BrokerRegistration | None:
        """The broker as a peer on ``listener`` dials it: its address there, or None if it
        does not advertise that listener. A broker looks its peers up by its own
        ``inter.broker.listener.name``, as Kafka does, so during a roll that changes that
        listener each broker reaches the others on the one it knows (``None``: the peer's own
        inter-broker address)."""
        if listener is None:
            return self
        address = self.endpoint(listener)
        if address is None:
            return None
        return replace(self, host=address[0], port=address[1])


def feature_tuples(ranges: dict[str, tuple[int, int]]) -> tuple[tuple[str, int, int], ...]:
    """Ranges (name -> (lowest, highest)) as a registration holds them."""
    return tuple((name, low, high) for name, (low, high) in sorted(ranges.items()))


def replica_key(topic_id: str, partition: int) -> str:
    """How a registration names a replica: its topic id (never reused, unlike a name) and
    partition index."""
    return f"{topic_id}:{partition}"


def join_list(values: tuple[str, ...] | frozenset[str]) -> str:
    """A registration's list as one annotation or column value: sorted, comma-separated
    (log dir paths and replica keys hold no commas)."""
    return ",".join(sorted(values))


def split_list(text: str | None) -> tuple[str, ...]:
    """``join_list`` read back; an absent value (an older broker) is empty."""
    return tuple(v for v in (text or "").split(",") if v)


@dataclass(frozen=True, slots=True)
class ControllerLease:
    """Who holds the controller lease, and the controller epoch of that term."""

    holder: int
    epoch: int

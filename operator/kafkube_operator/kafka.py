"""The operator's one Kafka admin client: topics, partitions, configs and leader elections go
through the cluster's Kafka API, as `kafka-topics` and `kafka-configs` would send them, so
the brokers validate and apply every change exactly as for any other client.

kafka-python (pure Python, so the image needs no librdkafka) is the one client library that
speaks every admin API used here, AlterPartitionReassignments included. It is blocking; the
handlers run in kopf's thread pool.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.errors import KafkaError
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.structs import TopicPartition

from kafkube_contract.image import CORDONED_LOG_DIRS

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_MS = 15_000


USER_ENTITY, MATCH_EXACT = "user", 0  # ClientQuotaEntity.USER, MATCH_TYPE_EXACT
UPGRADE, SAFE_DOWNGRADE = 1, 2  # UpdateFeatures' upgrade types (KIP-584)


class KafkaRefused(Exception):
    """The cluster refused a request: Kafka's error name and message, for a Warning."""

    def __init__(self, what: str, error: object) -> None:
        super().__init__(f"{what}: {error}")  # kafka-python's: "[Error 40] Name: message"


@dataclass(frozen=True)
class AdminSecurity:
    """How the operator logs in on a secured cluster's replication listener: mutual TLS with
    its own certificate of the cluster CA (model/cluster_pki.py), PEM text."""

    ca: str
    certificate: str
    key: str


class KafkaAdmin:
    """One connection to a cluster, shared by the handlers' threads: kafka-python's client is
    not thread-safe, so one request at a time (a lock), and closing waits for the request
    under way; a request on a closed client is refused (the next pass gets a new one)."""

    def __init__(self, bootstrap: Sequence[str], security: AdminSecurity | None = None,
                 connect: Callable[..., Any] = KafkaAdminClient) -> None:
        self.security = security
        self.fence: Callable[[], float | None] = lambda: None  # before each request
        self._lock = threading.Lock()
        self._closed = False
        self._files: tempfile.TemporaryDirectory | None = None
        options: dict[str, Any] = {}
        if security is not None:
            # kafka-python reads PEM from files only; private to this process, gone on close.
            self._files = tempfile.TemporaryDirectory(prefix="kafkube-operator-")
            paths = {}
            for name, text in (("ca.crt", security.ca), ("operator.crt", security.certificate),
                               ("operator.key", security.key)):
                path = os.path.join(self._files.name, name)
                with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                    f.write(text)
                paths[name] = path
            options = {"security_protocol": "SSL", "ssl_cafile": paths["ca.crt"],
                       "ssl_certfile": paths["operator.crt"], "ssl_keyfile": paths["operator.key"]}
        try:
            self._client = connect(
                bootstrap_servers=list(bootstrap), client_id="kafkube-operator",
                request_timeout_ms=REQUEST_TIMEOUT_MS, **options)
        except Exception:
            self._cleanup()
            raise

    def _cleanup(self) -> None:
        if self._files is not None:
            self._files.cleanup()
            self._files = None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Once the request under way (another thread's) is done; again is a no-op."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._client.close()
            finally:
                self._cleanup()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._closed:
                raise KafkaRefused(what, "the admin client was closed (it failed another "
                                   "request); a new one is made on the next pass")
            self.fence()
            try:
                return fn(*args, **kwargs)
            except KafkaError as e:
                raise KafkaRefused(what, e) from None

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str]) -> None:
        """CreateTopics with counts: the brokers' controller places the replicas."""
        topic = NewTopic(name, num_partitions=partitions,
                         replication_factor=replication_factor, topic_configs=dict(configs))
        self._call(f"creating topic {name}", self._client.create_topics, [topic],
                   timeout_ms=REQUEST_TIMEOUT_MS)

    def add_partitions(self, name: str, total: int) -> None:
        """CreatePartitions up to ``total``: the brokers' controller places the new ones."""
        new = NewPartitions(total)
        self._call(f"adding partitions to {name}", self._client.create_partitions, {name: new},
                   timeout_ms=REQUEST_TIMEOUT_MS)

    def alter_topic_configs(self, name: str, set_configs: Mapping[str, str],
                            delete: Iterable[str]) -> None:
        """IncrementalAlterConfigs: only the keys named change."""
        ops: dict[str, Any] = {k: (AlterConfigOp.SET, v) for k, v in set_configs.items()}
        ops.update({k: (AlterConfigOp.DELETE, None) for k in delete})
        resource = ConfigResource(ConfigResourceType.TOPIC, name, configs=ops)
        result = self._call(f"changing configs of {name}", self._client.alter_configs,
                            [resource], raise_on_unknown=False, incremental=True)
        _raise_errors(f"changing configs of {name}", result)

    def throttle(self, rate: int | None, brokers: Iterable[int],
                 topics: Mapping[str, Mapping[str, str | None]]) -> None:
        """The replication throttle, as `kafka-reassign-partitions --throttle` sets it: the
        rate on each broker (None removes it), the throttled-replica lists per topic (None
        removes a list)."""
        resources = [ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            key: (AlterConfigOp.SET, value) if value is not None else (AlterConfigOp.DELETE, None)
            for key, value in lists.items()}) for topic, lists in topics.items()]
        op = (AlterConfigOp.SET, str(rate)) if rate is not None else (AlterConfigOp.DELETE, None)
        resources += [ConfigResource(ConfigResourceType.BROKER, str(broker), configs={
            "leader.replication.throttled.rate": op,
            "follower.replication.throttled.rate": op}) for broker in sorted(brokers)]
        result = self._call("setting the replication throttle", self._client.alter_configs,
                            resources, raise_on_unknown=False, incremental=True)
        _raise_errors("setting the replication throttle", result)

    def cordon(self, cordon: Iterable[int], uncordon: Iterable[int]) -> None:
        """KIP-1066: brokers that get no new replicas (``cordoned.log.dirs=*``), and brokers
        that get them again (the key removed)."""
        resources = [ConfigResource(ConfigResourceType.BROKER, str(b), configs={
            CORDONED_LOG_DIRS: (AlterConfigOp.SET, "*")}) for b in sorted(cordon)]
        resources += [ConfigResource(ConfigResourceType.BROKER, str(b), configs={
            CORDONED_LOG_DIRS: (AlterConfigOp.DELETE, None)}) for b in sorted(uncordon)]
        if not resources:
            return
        result = self._call("cordoning brokers", self._client.alter_configs, resources,
                            raise_on_unknown=False, incremental=True)
        _raise_errors("cordoning brokers", result)

    def delete_topic(self, name: str, topic_id: str | None = None) -> None:
        """By id where one is known (DeleteTopics v6): a topic of the same name created again
        since (a producer's auto-creation, a user) is another topic and stays."""
        self._call(f"deleting topic {name}", self._client.delete_topics,
                   [uuid.UUID(topic_id) if topic_id else name], timeout_ms=REQUEST_TIMEOUT_MS)

    def reassign(self, moves: Mapping[tuple[str, int], Sequence[int]]) -> None:
        """AlterPartitionReassignments (KIP-455): the brokers copy the new replicas, then drop
        the old ones once the new are in sync."""
        wanted = {TopicPartition(topic, index): list(replicas)
                  for (topic, index), replicas in moves.items()}
        results = self._call("reassigning partitions", self._client.alter_partition_reassignments,
                             wanted, timeout_ms=REQUEST_TIMEOUT_MS)
        refused = {f"{tp.topic}-{tp.partition}": error.__name__
                   for tp, error in results.items() if error is not None}
        if refused:
            raise KafkaRefused("reassigning partitions", refused)

    def cancel_reassignments(self, partitions: Iterable[tuple[str, int]]) -> None:
        """AlterPartitionReassignments with no target (KIP-455): the moves stop, the
        replicas go back to the ones before them."""
        wanted = {TopicPartition(t, i): None for t, i in partitions}
        if wanted:
            self._call("cancelling reassignments", self._client.alter_partition_reassignments,
                       wanted, timeout_ms=REQUEST_TIMEOUT_MS)

    def log_dirs(self, brokers: Iterable[int]
                 ) -> dict[int, tuple[int, dict[tuple[str, int], int]]]:
        """DescribeLogDirs of each broker: its log dirs' total bytes (v4's TotalBytes, -1
        when the broker does not say) and each partition's size, the largest copy where a
        broker has it in two dirs (a move between dirs)."""
        answers = self._call("describing log dirs", self._client.describe_log_dirs,
                             None, sorted(brokers))
        found: dict[int, tuple[int, dict[tuple[str, int], int]]] = {}
        for answer in answers or ():
            total, sizes = 0, {}
            for log_dir in answer.get("log_dirs") or ():
                if log_dir.get("error_code"):
                    continue
                total += max(int(log_dir.get("total_bytes", -1)), 0)
                for topic in log_dir.get("topics") or ():
                    for p in topic.get("partitions") or ():
                        key = (topic["name"], int(p["partition_index"]))
                        sizes[key] = max(sizes.get(key, 0), int(p["partition_size"]))
            found[int(answer["broker"])] = (total or -1, sizes)
        return found

    def elect_preferred(self, partitions: Iterable[tuple[str, int]]) -> None:
        wanted: dict[str, list[int]] = {}
        for topic, index in partitions:
            wanted.setdefault(topic, []).append(index)
        self._call("electing preferred leaders", self._client.elect_leaders, 0,
                   topic_partitions=wanted, timeout_ms=REQUEST_TIMEOUT_MS)


    def update_feature(self, name: str, level: int, downgrade: bool = False) -> None:
        """UpdateFeatures (KIP-584), as ``kafka-features.sh upgrade`` or ``downgrade`` sends
        it: ``name`` raised to ``level``, or lowered by a safe downgrade. The controller
        refuses a level a registered broker does not support."""
        what = f"{'lowering' if downgrade else 'raising'} {name} to {level}"
        upgrade_type = SAFE_DOWNGRADE if downgrade else UPGRADE
        result = self._call(what, self._client.update_features,
                            {name: (upgrade_type, level)}, timeout_ms=REQUEST_TIMEOUT_MS)
        outcome = (result or {}).get(name, "OK")
        if outcome != "OK":
            raise KafkaRefused(what, outcome)

    # Users: SCRAM credentials (KIP-554) and ACLs, as kafka-configs and kafka-acls send them.

    def scram_users(self, users: Iterable[str]) -> set[str]:
        """Which of ``users`` hold a SCRAM-SHA-512 credential."""
        found = self._call("describing SCRAM credentials",
                           self._client.describe_user_scram_credentials, list(users))
        return {user for user, info in (found or {}).items() if not info.get("error") and any(
            c["mechanism"] == ScramMechanism.SCRAM_SHA_512 for c in info["credential_infos"])}

    def upsert_scram(self, user: str, password: str) -> None:
        self._alter_scram(f"setting the SCRAM credential of {user}", UserScramCredentialUpsertion(
            user, ScramMechanism.SCRAM_SHA_512, password))

    def delete_scram(self, user: str) -> None:
        self._alter_scram(f"deleting the SCRAM credential of {user}",
                          UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512))

    def _alter_scram(self, what: str, alteration: Any) -> None:
        result = self._call(what, self._client.alter_user_scram_credentials, [alteration])
        refused = {user: error for user, error in (result or {}).items() if error}
        if refused:
            raise KafkaRefused(what, refused)

    # Client quotas (KIP-546): kafka-python has the messages, not the admin calls.

    def _send(self, what: str, request: Any) -> Any:
        manager = self._client._manager

        async def send() -> Any:
            return await manager.send(request)

        return self._call(what, manager.run, send)

    def quotas_of(self, users: Iterable[str]) -> dict[str, dict[str, float]]:
        """The quotas of each user entity named (the user alone, without a client-id)."""
        found: dict[str, dict[str, float]] = {}
        for user in users:
            what = f"describing the client quotas of {user}"
            response = self._send(what, DescribeClientQuotasRequest(
                components=[(USER_ENTITY, MATCH_EXACT, user)], strict=True))
            if response.error_code:
                raise KafkaRefused(what, response.error_message or response.error_code)
            for entry in response.entries or ():
                found.setdefault(user, {}).update({v.key: v.value for v in entry.values})
        return found

    def alter_quotas(self, user: str, set_values: Iterable[tuple[str, float]],
                     remove: Iterable[str]) -> None:
        what = f"altering the client quotas of {user}"
        ops = [(key, float(value), False) for key, value in set_values]
        ops += [(key, 0.0, True) for key in remove]
        response = self._send(what, AlterClientQuotasRequest(
            entries=[([(USER_ENTITY, user)], ops)], validate_only=False))
        refused = [e.error_message or e.error_code for e in response.entries if e.error_code]
        if refused:
            raise KafkaRefused(what, refused[0])

    def acls_of(self, principal: str) -> list[ACL]:
        """Every ACL of ``principal``, whatever its resource."""
        found, error = self._call(f"describing the ACLs of {principal}", self._client.describe_acls,
                                  _principal_filter(principal))
        if error is not None and getattr(error, "errno", 0):
            raise KafkaRefused(f"describing the ACLs of {principal}", error)
        return list(found)

    def create_acls(self, acls: Sequence[ACL]) -> None:
        result = self._call("creating ACLs", self._client.create_acls, list(acls))
        if result["failed"]:
            raise KafkaRefused("creating ACLs", result["failed"][0])

    def delete_acls(self, acls: Sequence[ACL]) -> None:
        """Each exactly (an ACL is its own filter)."""
        filters = [ACLFilter(a.principal, a.host, a.operation, a.permission_type,
                             ResourcePatternFilter(a.resource_pattern.resource_type,
                                                   a.resource_pattern.resource_name,
                                                   a.resource_pattern.pattern_type))
                   for a in acls]
        for _, _, error in self._call("deleting ACLs", self._client.delete_acls, filters):
            if error is not None and getattr(error, "errno", 0):
                raise KafkaRefused("deleting ACLs", error)


def _principal_filter(principal: str) -> ACLFilter:
    return ACLFilter(principal=principal, host=None, operation=ACLOperation.ANY,
                     permission_type=ACLPermissionType.ANY,
                     resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                            ACLResourcePatternType.ANY))


def make_acl(principal: str, host: str, operation: str, permission: str, resource_type: str,
             resource_name: str, pattern_type: str) -> ACL:
    """kafka-python's ACL from Kafka's names (model/user.py's AclBinding fields)."""
    return ACL(principal, host, ACLOperation[operation], ACLPermissionType[permission],
               ResourcePattern(ResourceType[resource_type], resource_name,
                               ACLResourcePatternType[pattern_type]))


def acl_fields(acl: ACL) -> tuple[str, str, str, str, str, str, str]:
    """The inverse of ``make_acl``."""
    pattern = acl.resource_pattern
    return (acl.principal, acl.host, acl.operation.name, acl.permission_type.name,
            pattern.resource_type.name, pattern.resource_name, pattern.pattern_type.name)


def _raise_errors(what: str, result: Any) -> None:
    """kafka-python returns per-resource results ("OK" or the error as text) instead of
    raising them."""
    for by_name in (result or {}).values():
        for outcome in by_name.values():
            if outcome != "OK":
                raise KafkaRefused(what, outcome)


class AdminClients:
    """One admin client per KafkaCluster, made on first use from its live brokers' advertised
    addresses (so the operator reaches the brokers from outside the cluster in tests just as
    from its pod), dropped when a request fails so the next one reconnects."""

    def __init__(self, security: Callable[[tuple[str, str], str | None], AdminSecurity | None]
                 | None = None,
                 make: Callable[[Sequence[str], AdminSecurity | None], KafkaAdmin] = KafkaAdmin
                 ) -> None:
        """``security``: how to log in on a cluster, ((namespace, name), listener) → None for
        plaintext, read when a client is made."""
        self._clients: dict[tuple[str, str], KafkaAdmin] = {}
        self._listeners: dict[tuple[str, str], str | None] = {}
        self._lock = threading.Lock()
        self._security = security or (lambda key, listener: None)
        self._make = make
        self.fence: Callable[[], float | None] = lambda: None  # given to each client made

    def of(self, key: tuple[str, str], bootstrap: Callable[[], Sequence[str]],
           listener: str | None = None) -> KafkaAdmin:
        """The cluster's client on ``listener`` (None: the brokers' inter-broker addresses);
        one made for another listener is replaced (a listener change moved the operator)."""
        with self._lock:
            client = self._clients.get(key)
            moved = client is not None and self._listeners.get(key) != listener
        if moved:
            self.drop(key, client)
        elif client is not None and not client.closed:
            return client
        servers = bootstrap()
        if not servers:
            raise KafkaRefused(f"cluster {key[1]}", "no live broker to connect to")
        try:
            made = self._make(servers, self._security(key, listener))
        except KafkaError as e:
            raise KafkaRefused(f"connecting to cluster {key[1]}", e) from None
        made.fence = self.fence
        stale: KafkaAdmin | None = None
        with self._lock:
            current = self._clients.get(key)
            if current is not None and not current.closed \
                    and self._listeners.get(key) == listener:
                client = current  # another thread made one meanwhile
            else:
                self._clients[key], self._listeners[key] = made, listener
                client, stale, made = made, current, None
        for unused in (made, stale):
            if unused is not None:
                unused.close()
        return client

    def drop(self, key: tuple[str, str], client: KafkaAdmin | None = None) -> None:
        """Forget the cluster's client and close it (once its request under way is done);
        given ``client``, only if that is still the one (not one another thread has made
        since)."""
        with self._lock:
            current = self._clients.get(key)
            if current is None or (client is not None and current is not client):
                current = None
            else:
                del self._clients[key]
        if current is not None:
            current.close()
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

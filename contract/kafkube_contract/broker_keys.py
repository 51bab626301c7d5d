"""The broker and topic configuration keys, declared once with Kafka's names, types, defaults
and validators: the table both sides of the contract pin.

The brokers parse their ``server.properties``, DescribeConfigs and topic overrides with it
(broker/config/broker_config.py); the operator judges a KafkaCluster's ``spec.config`` and
reads Kafka's defaults (leader rebalance) with the same table, so a key one accepts the other
does not refuse. A topic-level key (``segment.bytes``) names the broker key that supplies its
default (``log.segment.bytes``). Keys are added, never renamed or removed, within a contract
version (kafkube_contract/__init__.py).
"""

from __future__ import annotations

from kafkube_contract.config_keys import (
    INT_MAX,
    LONG_MAX,
    ConfigError,
    ConfigKey,
    at_least,
    between,
    keys_by_name,
    one_of,
    throttled_replicas,
)


def _assignors(key: str, value: object) -> None:
    one_of("uniform", "range")(key, value)
    if not value:
        raise ConfigError(f"{key}: at least one assignor is needed (the first is the default)")


BROKER_KEYS = keys_by_name(
    ConfigKey("node.id", "int", 0, "The id of this broker in the cluster.", at_least(0)),
    ConfigKey("listeners", "list", ["PLAINTEXT://:9092"],
              "Listener URIs to bind, e.g. PLAINTEXT://127.0.0.1:9092."),
    ConfigKey("advertised.listeners", "list", None,
              "Listener URIs given to clients in Metadata; defaults to listeners."),
    ConfigKey("listener.security.protocol.map", "list",
              ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT",
               "SASL_SSL:SASL_SSL"],
              "Each listener name's security protocol, NAME:PROTOCOL."),
    ConfigKey("inter.broker.listener.name", "string", None,
              "The listener brokers use to reach each other; by default the one named by "
              "security.inter.broker.protocol."),
    ConfigKey("security.inter.broker.protocol", "string", "PLAINTEXT",
              "The security protocol of the inter-broker listener when "
              "inter.broker.listener.name is not set.",
              one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    ConfigKey("ssl.keystore.type", "string", "PEM",
              "Format of the key store; kafkube reads PEM (key and certificate chain).",
              one_of("PEM", "JKS", "PKCS12")),
    ConfigKey("ssl.keystore.location", "string", None,
              "A PEM file with the private key and the certificate chain."),
    ConfigKey("ssl.keystore.key", "password", None,
              "The PEM private key itself, in place of a file."),
    ConfigKey("ssl.keystore.certificate.chain", "string", None,
              "The PEM certificate chain itself, in place of a file."),
    ConfigKey("ssl.key.password", "password", None, "Password of an encrypted private key."),
    ConfigKey("ssl.keystore.password", "password", None,
              "Password of the key store (an encrypted PEM key when ssl.key.password is "
              "not set)."),
    ConfigKey("ssl.truststore.type", "string", "PEM",
              "Format of the trust store; kafkube reads PEM certificates.",
              one_of("PEM", "JKS", "PKCS12")),
    ConfigKey("ssl.truststore.location", "string", None,
              "A PEM file of the certificates trusted to sign peers' certificates."),
    ConfigKey("ssl.truststore.certificates", "string", None,
              "The trusted PEM certificates themselves, in place of a file."),
    ConfigKey("ssl.truststore.password", "password", None, "Unused with PEM trust stores."),
    ConfigKey("ssl.client.auth", "string", "none",
              "Whether clients of an SSL listener must (required) or may (requested) "
              "present a certificate, whose subject becomes their principal.",
              one_of("required", "requested", "none")),
    ConfigKey("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"],
              "TLS versions accepted.", one_of("TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.cipher.suites", "list", [],
              "TLS 1.2 cipher suites (OpenSSL names); empty: the library's defaults."),
    ConfigKey("ssl.principal.mapping.rules", "string", "DEFAULT",
              "Rules mapping a client certificate's subject to a principal name, as Kafka's "
              "(RULE:pattern/replacement/[LU], ..., DEFAULT)."),
    ConfigKey("ssl.endpoint.identification.algorithm", "string", "https",
              "https: a broker dialling another checks the host name against the peer's "
              "certificate; empty: it does not."),
    ConfigKey("sasl.enabled.mechanisms", "list", ["GSSAPI"],
              "SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512."),
    ConfigKey("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI",
              "The SASL mechanism a broker authenticates with to other brokers."),
    ConfigKey("sasl.jaas.config", "password", None,
              "JAAS login module configuration: the broker's own username and password, "
              "and PLAIN's user_NAME=\"password\" entries."),
    ConfigKey("sasl.server.max.receive.size", "int", 524288,
              "Largest SASL token accepted before a client is authenticated.", at_least(1)),
    ConfigKey("connections.max.reauth.ms", "long", 0,
              "Longest SASL session (KIP-368): a client re-authenticates within it or its "
              "connection is closed; 0: sessions do not expire.", at_least(0)),
    ConfigKey("connection.failed.authentication.delay.ms", "int", 100,
              "Delay before a connection that failed to authenticate is closed.", at_least(0)),
    ConfigKey("kafkube.network.send.thread", "bool", True,
              "Plain-text listeners send responses from a thread of their own beside the "
              "event loop (another core); false: the event loop sends them."),
    ConfigKey("kafkube.authentication.timeout.ms", "long", 10000,
              "A connection that has not finished its TLS handshake and SASL authentication "
              "within this time is closed.", at_least(1)),
    ConfigKey("authorizer.class.name", "string", "",
              "org.apache.kafka.metadata.authorizer.StandardAuthorizer turns on ACLs; empty: "
              "every request is allowed.",
              one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                     "kafka.security.authorizer.AclAuthorizer")),
    ConfigKey("super.users", "string", "",
              "Principals allowed everything, separated by semicolons (User:admin;User:broker)."),
    ConfigKey("allow.everyone.if.no.acl.found", "bool", False,
              "Allow a request on a resource no ACL matches."),
    ConfigKey("log.dirs", "list", None, "Directories holding partition logs; log.dir if unset."),
    ConfigKey("log.dir", "string", "/tmp/kafka-logs", "The log directory when log.dirs is unset."),
    ConfigKey("broker.rack", "string", None, "Rack of this broker, for rack-aware placement."),
    ConfigKey("num.partitions", "int", 1, "Partitions of an auto-created topic.", at_least(1)),
    ConfigKey("default.replication.factor", "int", 1,
              "Replication factor of auto-created topics.", at_least(1)),
    ConfigKey("auto.create.topics.enable", "bool", True,
              "Create a topic when a client asks Metadata for it."),
    ConfigKey("delete.topic.enable", "bool", True, "Allow DeleteTopics."),
    ConfigKey("message.max.bytes", "int", 1048588,
              "Largest record batch a topic accepts, after compression.", at_least(0)),
    ConfigKey("socket.request.max.bytes", "int", 104857600,
              "Largest request frame accepted.", at_least(1)),
    ConfigKey("max.request.partition.size.limit", "int", 2000,
              "Most partitions one DescribeTopicPartitions response carries; the client pages "
              "through the rest with the cursor.", at_least(1)),
    ConfigKey("quota.window.num", "int", 11,
              "Samples kept in memory for client quotas (KIP-13).", at_least(1)),
    ConfigKey("quota.window.size.seconds", "int", 1,
              "Time span of each sample of client quotas.", at_least(1)),
    ConfigKey("controller.quota.window.num", "int", 11,
              "Samples kept for controller mutation quotas (KIP-599).", at_least(1)),
    ConfigKey("controller.quota.window.size.seconds", "int", 1,
              "Time span of each sample of controller mutation quotas.", at_least(1)),
    ConfigKey("queued.max.request.bytes", "long", -1,
              "Request bytes all connections may hold at once; a connection that would go "
              "over waits before reading more (-1: no limit).", at_least(-1)),
    ConfigKey("socket.send.buffer.bytes", "int", 102400,
              "SO_SNDBUF of each accepted connection (-1: the operating system's default, "
              "autotuned). Below 64 KiB, loopback connections (64 KiB segments) wait on "
              "delayed ACKs.", at_least(-1)),
    ConfigKey("socket.receive.buffer.bytes", "int", 102400,
              "SO_RCVBUF of the listening socket, which accepted connections inherit (-1: the "
              "operating system's default, autotuned).", at_least(-1)),
    ConfigKey("connections.max.idle.ms", "long", 600000,
              "A connection with no request in flight and nothing read or written for this "
              "long is closed.", at_least(1)),
    ConfigKey("max.connections", "int", 2147483647,
              "Connections the broker keeps open at once; beyond it, new ones wait to be "
              "accepted.", at_least(1)),
    ConfigKey("max.connections.per.ip", "int", 2147483647,
              "Connections one client address may hold; beyond it, new ones are closed.",
              at_least(1)),
    ConfigKey("log.segment.bytes", "int", 1073741824, "Segment size before rolling.",
              at_least(14)),
    ConfigKey("log.roll.ms", "long", None, "Segment age before rolling; log.roll.hours if unset.",
              at_least(1)),
    ConfigKey("log.roll.hours", "int", 168, "Segment age in hours before rolling.", at_least(1)),
    ConfigKey("log.retention.ms", "long", None,
              "Time to keep a segment; -1 for no limit. Falls back to minutes, then hours.",
              at_least(-1)),
    ConfigKey("log.retention.minutes", "int", None, "Retention in minutes if .ms is unset."),
    ConfigKey("log.retention.hours", "int", 168, "Retention in hours if .ms and .minutes unset."),
    ConfigKey("log.retention.bytes", "long", -1, "Size a partition may reach; -1 for no limit.",
              at_least(-1)),
    ConfigKey("log.retention.check.interval.ms", "long", 300000,
              "How often retention is enforced.", at_least(1)),
    ConfigKey("log.index.interval.bytes", "int", 4096,
              "Bytes between two offset index entries.", at_least(0)),
    ConfigKey("log.index.size.max.bytes", "int", 10485760,
              "Largest offset index; a full index rolls the segment.", at_least(4)),
    ConfigKey("log.segment.delete.delay.ms", "long", 60000,
              "Delay before a deleted segment's files are removed.", at_least(0)),
    ConfigKey("log.cleanup.policy", "list", ["delete"], "delete and/or compact.",
              one_of("delete", "compact")),
    ConfigKey("log.cleaner.enable", "bool", True,
              "Run the log cleaner, which compacts topics whose cleanup.policy has compact."),
    ConfigKey("log.cleaner.backoff.ms", "long", 15000,
              "How long the cleaner sleeps when no log needs cleaning.", at_least(0)),
    ConfigKey("log.cleaner.min.cleanable.ratio", "double", 0.5,
              "Share of a log's bytes that must be dirty (not yet compacted) before the cleaner "
              "picks it.", between(0, 1)),
    ConfigKey("log.cleaner.delete.retention.ms", "long", 86400000,
              "How long a compacted log keeps a tombstone after first cleaning it.", at_least(0)),
    ConfigKey("log.cleaner.min.compaction.lag.ms", "long", 0,
              "Least age of a message before it may be compacted.", at_least(0)),
    ConfigKey("log.message.timestamp.type", "string", "CreateTime",
              "CreateTime keeps the producer's timestamp; LogAppendTime stamps the broker's.",
              one_of("CreateTime", "LogAppendTime")),
    ConfigKey("log.message.timestamp.before.max.ms", "long", LONG_MAX,
              "How far in the past a CreateTime record's timestamp may be; older records are "
              "refused with INVALID_TIMESTAMP.", at_least(0)),
    ConfigKey("log.message.timestamp.after.max.ms", "long", 3_600_000,
              "How far in the future a CreateTime record's timestamp may be (Kafka 4's "
              "default: an hour); later records are refused with INVALID_TIMESTAMP.",
              at_least(0)),
    ConfigKey("log.flush.interval.messages", "long", LONG_MAX,
              "Messages appended before an fsync.", at_least(1)),
    ConfigKey("log.flush.interval.ms", "long", LONG_MAX, "Time before an fsync.", at_least(0)),
    ConfigKey("compression.type", "string", "producer",
              "Only 'producer' (store batches as sent) is supported.", one_of("producer")),
    ConfigKey("min.insync.replicas", "int", 1, "Replicas that must ack an acks=all write.",
              at_least(1)),
    ConfigKey("unclean.leader.election.enable", "bool", False,
              "Never elect a replica outside the ISR while false."),
    ConfigKey("replica.fetch.max.bytes", "int", 1048576, "Per-partition follower fetch size.",
              at_least(0)),
    ConfigKey("replica.fetch.response.max.bytes", "int", 10485760,
              "Largest fetch response a follower asks for.", at_least(0)),
    ConfigKey("replica.fetch.wait.max.ms", "int", 500,
              "How long a follower fetch waits at the leader for new data.", at_least(0)),
    ConfigKey("replica.fetch.min.bytes", "int", 1,
              "Bytes a follower fetch waits for before the leader answers.", at_least(1)),
    ConfigKey("replica.fetch.backoff.ms", "int", 1000,
              "Pause after a failed follower fetch.", at_least(0)),
    ConfigKey("replica.socket.timeout.ms", "int", 30000,
              "Follower fetch network timeout.", at_least(1)),
    ConfigKey("replica.lag.time.max.ms", "long", 30000,
              "A follower that has not caught up for this long leaves the ISR.", at_least(1)),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", "long", 5000,
              "How often high watermarks are written to replication-offset-checkpoint.",
              at_least(1)),
    ConfigKey("broker.session.timeout.ms", "int", 9000,
              "A broker whose liveness lease is not renewed for this long is fenced.",
              at_least(1)),
    ConfigKey("broker.heartbeat.interval.ms", "int", 2000,
              "How often a broker renews its liveness lease.", at_least(1)),
    ConfigKey("auto.leader.rebalance.enable", "bool", True,
              "Move leadership back to preferred replicas when brokers are imbalanced."),
    ConfigKey("leader.imbalance.per.broker.percentage", "int", 10,
              "Imbalance ratio per broker above which leaders are rebalanced.",
              between(0, 100)),
    ConfigKey("leader.imbalance.check.interval.seconds", "long", 300,
              "How often the controller checks the leader imbalance.", at_least(1)),
    ConfigKey("leader.replication.throttled.rate", "long", LONG_MAX,
              "Bytes/s a leader sends to out-of-sync replicas its topics list in "
              "leader.replication.throttled.replicas.", at_least(0)),
    ConfigKey("follower.replication.throttled.rate", "long", LONG_MAX,
              "Bytes/s a follower fetches for out-of-sync replicas its topics list in "
              "follower.replication.throttled.replicas.", at_least(0)),
    ConfigKey("cordoned.log.dirs", "list", [],
              "Log dirs that get no new replicas (KIP-1066); * cordons the whole broker, so "
              "topics and partitions created meanwhile are placed on other brokers. The "
              "operator cordons the brokers it drains before a scale-down."),
    ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX,
              "Bytes/s for moving replicas between log dirs of one broker; kafkube does not "
              "move replicas between log dirs, so nothing is throttled by it.", at_least(0)),
    ConfigKey("controlled.shutdown.enable", "bool", True,
              "Move leadership away before a broker stops on SIGTERM."),
    ConfigKey("request.timeout.ms", "int", 30000,
              "How long the broker's own requests wait: a transaction's state written to "
              "its ISR, its markers written by partition leaders.", at_least(0)),
    ConfigKey("offsets.commit.timeout.ms", "int", 5000,
              "How long an offset commit waits for the offsets partition's ISR.", at_least(1)),
    ConfigKey("offsets.topic.replication.factor", "int", 3,
              "Replication factor of __consumer_offsets (capped at the live brokers).",
              at_least(1)),
    ConfigKey("kafkube.coordination.backend", "string", "sqlite",
              "Where leases and the cluster image live: sqlite (a local cluster, one shared "
              "file) or kubernetes (Leases and ConfigMaps in kafkube.kubernetes.namespace).",
              one_of("sqlite", "kubernetes")),
    ConfigKey("kafkube.cluster.name", "string", "kafkube",
              "The cluster's name on Kubernetes: it prefixes its Leases and ConfigMaps."),
    ConfigKey("kafkube.kubernetes.namespace", "string", None,
              "Namespace of the coordination objects; default the pod's own (its service "
              "account's), else POD_NAMESPACE, else default."),
    ConfigKey("kafkube.kubernetes.kubeconfig", "string", None,
              "Kubeconfig for a broker outside the cluster; default the service account's "
              "credentials in a pod, else ~/.kube/config."),
    ConfigKey("kafkube.coordination.path", "string", None,
              "SQLite file of the embedded coordination backend, shared by every broker of "
              "a local cluster; default cluster.db in the first log dir."),
    ConfigKey("fetch.max.bytes", "int", 57671680, "Largest Fetch response the broker builds.",
              at_least(0)),
    ConfigKey("max.incremental.fetch.session.cache.slots", "int", 1000,
              "Incremental fetch sessions (KIP-227) kept; 0 turns them off.", at_least(0)),
    ConfigKey("offsets.topic.num.partitions", "int", 50,
              "Partitions of __consumer_offsets (fixed once the topic exists).", at_least(1)),
    ConfigKey("offsets.topic.segment.bytes", "int", 104857600,
              "Segment size of __consumer_offsets.", at_least(14)),
    ConfigKey("transaction.state.log.num.partitions", "int", 50,
              "Partitions of __transaction_state (fixed once the topic exists).", at_least(1)),
    ConfigKey("transaction.state.log.replication.factor", "int", 3,
              "Replication factor of __transaction_state (capped at the live brokers).",
              at_least(1)),
    ConfigKey("transaction.state.log.min.isr", "int", 2,
              "min.insync.replicas of __transaction_state: a transaction's state change is "
              "acknowledged once this many replicas hold it.", at_least(1)),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104857600,
              "Segment size of __transaction_state.", at_least(14)),
    ConfigKey("transaction.partition.verification.enable", "bool", True,
              "Before a transaction's first batch to a partition, its leader asks the "
              "coordinator whether the partition was added (KIP-890): a late or stray "
              "write cannot open a transaction nobody will end."),
    ConfigKey("add.partitions.to.txn.retry.backoff.ms", "int", 20,
              "The backoff between a leader's retries of adding partitions to a transaction "
              "(transaction.version 2) that the coordinator answered CONCURRENT_TRANSACTIONS.",
              at_least(0)),
    ConfigKey("add.partitions.to.txn.retry.backoff.max.ms", "int", 100,
              "How long a leader retries adding partitions to a transaction before the "
              "producer gets a retriable error; for adds only, not verification.",
              at_least(0)),
    ConfigKey("transaction.max.timeout.ms", "int", 900000,
              "Largest transaction.timeout.ms a producer may ask for.", at_least(1)),
    ConfigKey("transactional.id.expiration.ms", "int", 604800000,
              "How long a transactional id with no transaction in progress is remembered.",
              at_least(1)),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
              "How often transactions past their timeout are looked for and aborted.",
              at_least(1)),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
              "How often expired transactional ids are removed.", at_least(1)),
    ConfigKey("producer.id.expiration.ms", "int", 86400000,
              "How long a partition's replicas keep a producer id that wrote nothing there; "
              "never while one of its transactions is open there. A producer id may go "
              "sooner once retention has deleted its last write (and the broker restarts). "
              "At or above the producers' delivery.timeout.ms, a retry is never taken for a "
              "new producer's batch (and duplicated).", at_least(1)),
    ConfigKey("producer.id.expiration.check.interval.ms", "int", 600000,
              "How often producer ids past producer.id.expiration.ms are removed.",
              at_least(1)),
    ConfigKey("offsets.retention.minutes", "int", 10080,
              "How long offsets of an empty group are kept.", at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", "long", 600000,
              "How often expired offsets are removed.", at_least(1)),
    ConfigKey("offset.metadata.max.bytes", "int", 4096,
              "Largest metadata string of a committed offset.", at_least(0)),
    ConfigKey("group.initial.rebalance.delay.ms", "int", 3000,
              "How long a new group waits for more members before its first rebalance.",
              at_least(0)),
    ConfigKey("group.min.session.timeout.ms", "int", 6000,
              "Smallest session.timeout.ms a consumer may ask for.", at_least(0)),
    ConfigKey("group.max.session.timeout.ms", "int", 1800000,
              "Largest session.timeout.ms a consumer may ask for.", at_least(0)),
    ConfigKey("group.max.size", "int", INT_MAX, "Most members a group may have.", at_least(1)),
    ConfigKey("group.consumer.session.timeout.ms", "int", 45000,
              "Session timeout of a member of a consumer group (KIP-848's protocol): the "
              "coordinator removes a member that does not heartbeat for this long.",
              at_least(1)),
    ConfigKey("group.consumer.min.session.timeout.ms", "int", 45000,
              "Smallest group.consumer.session.timeout.ms a group may be given.", at_least(1)),
    ConfigKey("group.consumer.max.session.timeout.ms", "int", 60000,
              "Largest group.consumer.session.timeout.ms a group may be given.", at_least(1)),
    ConfigKey("group.consumer.heartbeat.interval.ms", "int", 5000,
              "How often members of a consumer group heartbeat (the coordinator tells them).",
              at_least(1)),
    ConfigKey("group.consumer.min.heartbeat.interval.ms", "int", 5000,
              "Smallest group.consumer.heartbeat.interval.ms a group may be given.",
              at_least(1)),
    ConfigKey("group.consumer.max.heartbeat.interval.ms", "int", 15000,
              "Largest group.consumer.heartbeat.interval.ms a group may be given.",
              at_least(1)),
    ConfigKey("group.consumer.max.size", "int", INT_MAX,
              "Most members a consumer group (KIP-848) may have; group.max.size is the classic "
              "protocol's.", at_least(1)),
    ConfigKey("group.consumer.assignors", "list", ["uniform", "range"],
              "Server-side assignors of consumer groups, the first the default: uniform (sticky "
              "and balanced) and range (per topic, co-partitioned topics together).",
              _assignors),
    ConfigKey("group.consumer.migration.policy", "string", "bidirectional",
              "Whether a group changes protocol with its members: bidirectional (classic to "
              "consumer when a consumer member joins, back when the last one leaves), upgrade, "
              "downgrade or disabled.",
              one_of("bidirectional", "upgrade", "downgrade", "disabled")),
    ConfigKey("group.share.session.timeout.ms", "int", 45000,
              "Share groups (KIP-932): a member that does not heartbeat for this long is "
              "removed and the records it holds are released.", at_least(1)),
    ConfigKey("group.share.min.session.timeout.ms", "int", 45000,
              "Smallest group.share.session.timeout.ms a group may be given.", at_least(1)),
    ConfigKey("group.share.max.session.timeout.ms", "int", 60000,
              "Largest group.share.session.timeout.ms a group may be given.", at_least(1)),
    ConfigKey("group.share.heartbeat.interval.ms", "int", 5000,
              "How often members of a share group heartbeat (the coordinator tells them).",
              at_least(1)),
    ConfigKey("group.share.min.heartbeat.interval.ms", "int", 5000,
              "Smallest group.share.heartbeat.interval.ms a group may be given.", at_least(1)),
    ConfigKey("group.share.max.heartbeat.interval.ms", "int", 15000,
              "Largest group.share.heartbeat.interval.ms a group may be given.", at_least(1)),
    ConfigKey("group.share.max.size", "int", 200,
              "Most members a share group may have.", between(1, 1000)),
    ConfigKey("group.share.record.lock.duration.ms", "int", 30000,
              "How long a share consumer holds the records it fetched before they are "
              "released for redelivery, unless it acknowledges them.", between(1000, 3600000)),
    ConfigKey("group.share.delivery.count.limit", "int", 5,
              "How many times a record is delivered to a share group before it is archived "
              "(never delivered again).", between(2, 10)),
    ConfigKey("group.share.partition.max.record.locks", "int", 2000,
              "Most records of a partition in flight for one share group (between its start "
              "and end offsets).", between(100, 10000)),
    ConfigKey("group.share.min.record.lock.duration.ms", "int", 15000,
              "Smallest share.record.lock.duration.ms a group's config takes effect at.",
              between(1000, 30000)),
    ConfigKey("group.share.max.record.lock.duration.ms", "int", 60000,
              "Largest share.record.lock.duration.ms a group's config takes effect at.",
              between(30000, 3600000)),
    ConfigKey("group.share.min.delivery.count.limit", "int", 2,
              "Smallest share.delivery.count.limit a group's config takes effect at.",
              between(2, 5)),
    ConfigKey("group.share.max.delivery.count.limit", "int", 10,
              "Largest share.delivery.count.limit a group's config takes effect at.",
              between(5, 25)),
    ConfigKey("group.share.min.partition.max.record.locks", "int", 100,
              "Smallest share.partition.max.record.locks a group's config takes effect at.",
              between(100, 2000)),
    ConfigKey("group.share.max.partition.max.record.locks", "int", 4000,
              "Largest share.partition.max.record.locks a group's config takes effect at.",
              between(2000, 10000)),
    ConfigKey("group.share.max.share.sessions", "int", 2000,
              "Most share sessions (one per share consumer fetching from this broker) a broker "
              "keeps.", at_least(1)),
    ConfigKey("share.coordinator.state.topic.num.partitions", "int", 50,
              "Partitions of __share_group_state, where share groups' delivery state is "
              "stored (created on first use).", at_least(1)),
    ConfigKey("share.coordinator.state.topic.replication.factor", "int", 3,
              "Replication factor of __share_group_state (capped at the live brokers).",
              at_least(1)),
    ConfigKey("share.coordinator.state.topic.min.isr", "int", 2,
              "min.insync.replicas of __share_group_state (capped at its replication "
              "factor).", at_least(1)),
    ConfigKey("share.coordinator.state.topic.segment.bytes", "int", 104857600,
              "Segment size of __share_group_state.", at_least(1)),
    ConfigKey("kafkube.metrics.port", "int", 9404,
              "Port of the Prometheus /metrics endpoint; -1 disables it, 0 picks a free port.",
              between(-1, 65535)),
    ConfigKey("kafkube.health.port", "int", -1,
              "Port of the HTTP readiness endpoint: /ready answers 200 once the broker is back "
              "in the ISR of every partition it follows (a Kubernetes readinessProbe), "
              "/healthz while the process answers; -1 disables it, 0 picks a free port.",
              between(-1, 65535)),
    ConfigKey("kafkube.event.loop.stall.warn.ms", "long", 1000,
              "Log the event loop's stack when one step holds it this long (0 disables): "
              "every request and lease renewal waits behind such a step.", at_least(0)),
)

# Keys Kafka knows that do not apply to kafkube: accepted with a note, not a warning.
IGNORED_KAFKA_KEYS = frozenset({
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir",
    "process.roles",
    "controller.quorum.voters", "controller.quorum.bootstrap.servers", "controller.listener.names",
    "broker.id",
    "zookeeper.connect", "zookeeper.connection.timeout.ms",
    "offsets.topic.replication.factor", "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr", "log.flush.scheduler.interval.ms",
})

# topic key -> broker key that gives its default (LogConfig's "server default property"),
# or None for the few topic keys no broker key stands behind.
TOPIC_KEYS: dict[str, tuple[ConfigKey, str | None]] = {}


def _topic(name: str, broker_key: str, doc: str = "") -> None:
    base = BROKER_KEYS[broker_key]
    TOPIC_KEYS[name] = (
        ConfigKey(name, base.type, None, doc or base.doc, base.validator),
        broker_key,
    )


_topic("segment.bytes", "log.segment.bytes")
_topic("segment.ms", "log.roll.ms")
_topic("retention.ms", "log.retention.ms")
_topic("retention.bytes", "log.retention.bytes")
_topic("index.interval.bytes", "log.index.interval.bytes")
_topic("segment.index.bytes", "log.index.size.max.bytes")
_topic("file.delete.delay.ms", "log.segment.delete.delay.ms")
_topic("cleanup.policy", "log.cleanup.policy")
_topic("delete.retention.ms", "log.cleaner.delete.retention.ms")
_topic("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms")
_topic("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio")
_topic("message.timestamp.type", "log.message.timestamp.type")
_topic("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms")
_topic("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms")
_topic("max.message.bytes", "message.max.bytes")
_topic("flush.messages", "log.flush.interval.messages")
_topic("flush.ms", "log.flush.interval.ms")
_topic("compression.type", "compression.type")
_topic("min.insync.replicas", "min.insync.replicas")
_topic("unclean.leader.election.enable", "unclean.leader.election.enable")
for _side in ("leader", "follower"):
    TOPIC_KEYS[f"{_side}.replication.throttled.replicas"] = (ConfigKey(
        f"{_side}.replication.throttled.replicas", "list", [],
        f"Replicas of this topic whose replication the {_side} throttles at "
        f"{_side}.replication.throttled.rate while they are out of sync: '*' for all, or "
        "partition:broker pairs.", throttled_replicas), None)

# Broker keys that change at run time through AlterConfigs, per broker or as the cluster-wide
# default (Kafka's DynamicBrokerConfig.AllDynamicConfigs, as far as kafkube has them): every
# key standing behind a topic key, their synonyms, the cleaner's pace, the throttles and
# producer id expiry.
DYNAMIC_BROKER_KEYS = frozenset(
    {broker_key for _, broker_key in TOPIC_KEYS.values() if broker_key is not None}
    | {"log.roll.hours", "log.retention.minutes", "log.retention.hours",
       "log.cleaner.backoff.ms", "leader.replication.throttled.rate",
       "follower.replication.throttled.rate", "replica.alter.log.dirs.io.max.bytes.per.second",
       "cordoned.log.dirs", "producer.id.expiration.ms"}
)

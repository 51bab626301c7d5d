"""The features a cluster finalizes (KIP-584), as Kafka 4.x names them.

A feature's finalized level is cluster-wide and lives in the cluster image; ApiVersions
tells every client the supported range and the finalized level, and a client picks its
protocol by the level (a Java 4.x producer uses transaction.version 2 only when it is
finalized at 2). ``kafka-features.sh`` reads them (DescribeFeatures is ApiVersions) and
changes them (UpdateFeatures).

transaction.version: 0 and 1 are the transaction protocol of KIP-98 with KIP-890 part 1's
verification (kafkube writes the same records for both); 2 is KIP-890 part 2, where every
EndTxn bumps the producer epoch and Produce and TxnOffsetCommit add their partition to the
transaction themselves. A new cluster starts at 2, as a new Kafka 4.x cluster does; a
cluster whose image predates features reads as 0, as Kafka's does after a software upgrade.

group.version: 1 turns on the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat and
ConsumerGroupDescribe); a new cluster starts at 1, as a new Kafka 4.x cluster does, and a
cluster made before it turns it on with ``kafka-features.sh upgrade --feature group.version=1``.

share.version: 1 turns on share groups (KIP-932: ShareGroupHeartbeat, ShareGroupDescribe,
ShareFetch, ShareAcknowledge); a new cluster starts at 0 while kafkube's share groups are a
preview (``kafka-features.sh upgrade --feature share.version=1`` turns them on).
"""

from __future__ import annotations

TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"
# name -> (lowest, highest) level this broker can run at
SUPPORTED: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2), GROUP_VERSION: (0, 1),
                                         SHARE_VERSION: (0, 1)}
# share.version stays 0 on a new cluster while kafkube's share groups are a preview.
NEW_CLUSTER: dict[str, int] = {TRANSACTION_VERSION: 2, GROUP_VERSION: 1, SHARE_VERSION: 0}

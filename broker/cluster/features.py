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

kafkube.metadata.version: the format the cluster image is written in (kafkube's own
``metadata.version``: kafkube_contract/features.py); a new cluster starts at the newest, a
cluster made before it reads as 0 (format 1) until it is raised once every broker runs a
kafkube that supports the new level (UpdateFeatures refuses it before that).

A broker announces these ranges in its registration, and refuses to start in a cluster
that finalized a feature it does not know or a level above its range (``refusal``).
"""

from __future__ import annotations

from collections.abc import Mapping

from kafkube_contract.features import METADATA_VERSION, METADATA_VERSION_LATEST

TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"
# name -> (lowest, highest) level this broker can run at
SUPPORTED: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2), GROUP_VERSION: (0, 1),
                                         SHARE_VERSION: (0, 1),
                                         METADATA_VERSION: (1, METADATA_VERSION_LATEST)}
# share.version stays 0 on a new cluster while kafkube's share groups are a preview.
NEW_CLUSTER: dict[str, int] = {TRANSACTION_VERSION: 2, GROUP_VERSION: 1, SHARE_VERSION: 0,
                               METADATA_VERSION: METADATA_VERSION_LATEST}


class ClusterTooNew(Exception):
    """The cluster finalized a feature level this broker cannot run at: it does not start."""


def refusal(finalized: Mapping[str, int]) -> str | None:
    """Why this broker cannot run in a cluster with these finalized levels (a feature it
    does not know, or a level above its range: a newer kafkube raised it), or None."""
    problems = []
    for name, level in sorted(finalized.items()):
        low, high = SUPPORTED.get(name, (0, 0))
        if level > high:
            problems.append(f"{name} is finalized at {level}, " + (
                f"this broker supports {low}-{high}" if name in SUPPORTED
                else "a feature this broker does not know"))
    if not problems:
        return None
    return ("this kafkube is older than the cluster: " + "; ".join(problems) + ". Run the "
            "kafkube version that finalized it, or newer (an image rollback is possible "
            "only before the new level is finalized, or after a downgrade of the feature)")

"""Dynamic broker configs: those stored in the cluster metadata, laid over the static ones.

Kafka's brokers take ConfigRecords of BROKER resources from the metadata log and update
their KafkaConfig in place (DynamicConfigPublisher, DynamicBrokerConfig); here each new
cluster image does the same to the broker's BrokerConfig, before the replica manager takes
the image up, so the logs and throttles it reconfigures see the new values.
"""

from __future__ import annotations

import logging

from broker.cluster.image import ClusterImage
from broker.cluster.metadata import ClusterMetadata
from broker.config.broker_config import BrokerConfig
from kafkube_contract.image import DEFAULT_BROKER

log = logging.getLogger(__name__)


def follow_dynamic_configs(config: BrokerConfig, metadata: ClusterMetadata) -> None:
    """Apply the image's dynamic configs now and on every change; call this before anything
    else registers with ``metadata`` to read them."""

    def apply(image: ClusterImage) -> None:
        configs = image.broker_configs
        changed = config.apply_dynamic(configs.get(DEFAULT_BROKER, {}),
                                       configs.get(str(config.node_id), {}))
        if changed:
            log.info("dynamic broker configs now in effect: %s",
                     ", ".join(f"{key}={config[key]}" for key in changed))

    apply(metadata.image)
    metadata.listeners.append(apply)

"""``python -m bench image-format``: what each image format costs, format 1 (each partition
a JSON object) against format 2 (each an array, ``kafkube.metadata.version`` 2), on images of
1,000 to 50,000 partitions (RF 3, 10 partitions a topic): the JSON's size, its size once
gzip'd as the ConfigMap stores it (the API server's limit is 1 MiB), and the time to write
it and to read it back as a broker (``ClusterImage``) and as the operator (``ImageView``)
do at every change of the image. kafkube only: Kafka keeps its metadata in a log of records,
nothing like one document."""

from __future__ import annotations

import argparse
import gc
import gzip
import statistics
import time
import uuid
from collections.abc import Callable

from broker.cluster.image import ClusterImage
from kafkube_contract.features import METADATA_VERSION
from kafkube_contract.image import PartitionState, TopicMetadata, read_image_json

PARTITIONS_PER_TOPIC = 10


def image_of(partitions: int, level: int) -> ClusterImage:
    topics = {}
    for t in range(partitions // PARTITIONS_PER_TOPIC):
        states = tuple(PartitionState((i % 3, (i + 1) % 3, (i + 2) % 3),
                                      (i % 3, (i + 1) % 3, (i + 2) % 3), i % 3, 3, 7)
                       for i in range(PARTITIONS_PER_TOPIC))
        topics[f"topic-{t}"] = TopicMetadata(f"topic-{t}", str(uuid.UUID(int=t)), {}, states)
    return ClusterImage(topics=topics, features={METADATA_VERSION: level})


def median_ms(action: Callable[[], object], rounds: int) -> float:
    """The median time of ``action``, each round after a full collection, so one round's
    garbage is not charged to the next."""
    times = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench image-format", description=__doc__)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"{'partitions':>10} {'format':>6} {'JSON KB':>8} {'gzip KB':>8} {'write ms':>9} "
          f"{'broker read ms':>15} {'operator read ms':>17}")
    for partitions in args.partitions:
        for level in (1, 2):
            image = image_of(partitions, level)
            text = image.to_json()
            packed = gzip.compress(text.encode(), compresslevel=6, mtime=0)
            write = median_ms(lambda i=image: gzip.compress(
                i.to_json().encode(), compresslevel=6, mtime=0), args.rounds)
            broker = median_ms(lambda t=text: ClusterImage.from_json(t, 1), args.rounds)
            operator = median_ms(lambda t=text: read_image_json(t, 1), args.rounds)
            print(f"{partitions:>10,} {image.image_format:>6} {len(text) / 1000:>8.0f} "
                  f"{len(packed) / 1000:>8.1f} {write:>9.0f} {broker:>15.0f} {operator:>17.0f}")
    return 0

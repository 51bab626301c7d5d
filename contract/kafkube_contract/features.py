"""kafkube's own finalized feature, ``kafkube.metadata.version``, and the feature ranges a
broker announces in its registration: how a rolling upgrade changes what brokers store
without a broker of the older version ever meeting what it cannot read.

As Kafka's ``metadata.version`` (KIP-778), the level says which format the cluster's stored
state is written in, and it is raised only after every broker runs a version that reads the
new format: during the roll the new brokers write the old format, so an older broker (and a
rollback of the image) keeps working; once every registered broker announces the new level
in its supported range it is finalized (``kafka-features.sh upgrade --feature
kafkube.metadata.version=2``, or the operator: ``spec.metadataVersion``), and from then on a
broker of the older version cannot start: it refuses the newer format with a message saying
so. Lowering the level again (a safe downgrade) writes the older format at the next change.

Kafka's ``metadata.version`` itself is not used: its levels name Kafka releases
(``4.0-IV3``), which ``kafka-features.sh`` prints, and kafkube's formats are not theirs.

Levels:

* 0 (not finalized: a cluster made before this feature) and 1: image format 1, one JSON
  object per partition;
* 2: image format 2, one JSON array per partition (``kafkube_contract.image``): under a
  third of the text, written twice as fast and read almost twice as fast, which every
  broker does at every change (``python -m bench image-format``: at 10,000 partitions
  1.19 MB of JSON to 0.34 MB, written in 44 ms instead of 87, read in 71 ms instead of
  133).
"""

from __future__ import annotations

from collections.abc import Mapping

METADATA_VERSION = "kafkube.metadata.version"
#: The highest ``kafkube.metadata.version`` this code reads and writes.
METADATA_VERSION_LATEST = 2
_FORMAT_AT_LEVEL = {0: 1, 1: 1, 2: 2}


def image_format_at(level: int) -> int:
    """The image format written while ``kafkube.metadata.version`` is at ``level``."""
    return _FORMAT_AT_LEVEL[min(max(level, 0), METADATA_VERSION_LATEST)]


#: A broker's supported range of each feature it knows: name -> (lowest, highest).
FeatureRanges = Mapping[str, tuple[int, int]]


def format_ranges(ranges: FeatureRanges) -> str:
    """Ranges as one annotation or column value: ``name=low-high`` comma-separated, sorted
    (feature names hold neither ``=`` nor ``,``)."""
    return ",".join(f"{name}={low}-{high}" for name, (low, high) in sorted(ranges.items()))


def parse_ranges(text: str | None) -> dict[str, tuple[int, int]]:
    """``format_ranges`` read back. Empty (an older broker that announced none) is ``{}``;
    a malformed entry is skipped rather than read as some range."""
    found: dict[str, tuple[int, int]] = {}
    for entry in (text or "").split(","):
        name, _, levels = entry.partition("=")
        low, _, high = levels.partition("-")
        if name and low.isdigit() and high.isdigit():
            found[name] = (int(low), int(high))
    return found


def unsupported(announced: Mapping[int, FeatureRanges], name: str, level: int) -> list[str]:
    """Why the brokers ``announced`` (node id -> ranges) cannot run with ``name`` at
    ``level``, one reason per broker that cannot; empty when every one can. A broker that
    announced no ranges at all runs a kafkube from before announcements, which knows no
    level above those finalized when it was built: it can run with no raised level."""
    reasons = []
    for node_id, ranges in sorted(announced.items()):
        if not ranges:
            reasons.append(f"broker {node_id} runs an older kafkube that announces no "
                           "supported features")
        elif name not in ranges:
            reasons.append(f"broker {node_id} does not support {name}")
        elif not ranges[name][0] <= level <= ranges[name][1]:
            low, high = ranges[name]
            reasons.append(f"broker {node_id} supports {name} {low}-{high}")
    return reasons

"""The Kubernetes objects brokers write, as a reader of another version meets them
(kafkube_contract/objects.py): golden Leases and the metadata ConfigMap exactly as brokers
wrote them before the contract, read with today's readers."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from broker.cluster.kubernetes import decode_image
from kafkube_contract.image import StoredIdentity, read_image_doc
from kafkube_contract.objects import (
    broker_lease_name,
    controller_lease_name,
    controller_of,
    counters_name,
    epoch_ms,
    image_document,
    lease_duration_ms,
    metadata_name,
    micro_time,
    registration_of,
    renewed_until_ms,
    role_of,
    stored_identity,
)
from kafkube_contract.registration import BrokerRegistration, ControllerLease

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str, kind: str) -> Any:
    """A golden object as the API server would hand it to the client."""
    api = k8s.ApiClient()
    try:
        return api.deserialize((GOLDEN / name).read_text(), kind, "application/json")
    finally:
        api.close()


def test_the_names_are_those_brokers_use() -> None:
    assert (metadata_name("events"), counters_name("events"), controller_lease_name("events"),
            broker_lease_name("events", 2)) == (
        "events-metadata", "events-epochs", "events-controller", "events-broker-2")


def test_a_broker_lease_reads_as_the_registration_it_carries() -> None:
    lease = golden("lease-broker.json", "V1Lease")
    assert role_of(lease) == "broker"
    assert registration_of(lease) == BrokerRegistration(
        2, "events-kafka-2.events-brokers.kafka.svc", 9091, "zone-b", 17,
        "REPLICATION://events-kafka-2.events-brokers.kafka.svc:9091,"
        "PLAINTEXT://events-kafka-2.events-brokers.kafka.svc:9092")
    assert lease_duration_ms(lease) == 9000
    renewed = dt.datetime(2026, 3, 1, 10, 5, 0, 500000, tzinfo=dt.UTC)
    assert renewed_until_ms(lease) == epoch_ms(renewed) + 9000


def test_a_lease_without_the_milliseconds_annotation_goes_by_its_seconds() -> None:
    lease = golden("lease-broker.json", "V1Lease")
    del lease.metadata.annotations["kafkube.io/lease-duration-ms"]
    lease.metadata.annotations["kafkube.io/some-later-annotation"] = "ignored"
    assert lease_duration_ms(lease) == 9000 and registration_of(lease).node_id == 2


def test_the_controller_lease_reads_as_its_holder_and_epoch() -> None:
    lease = golden("lease-controller.json", "V1Lease")
    assert controller_of(lease) == ControllerLease(2, 5)
    lease.spec.holder_identity = None  # resigned
    assert controller_of(lease) is None


def test_the_metadata_configmap_reads_as_its_identity_and_image() -> None:
    config_map = golden("metadata-configmap.json", "V1ConfigMap")
    assert stored_identity(config_map) == StoredIdentity("q1Sh-9_ISia_zwGINzRvyQ", 42)
    doc = image_document(config_map.binary_data)
    assert "format" not in doc  # written before the contract
    view = read_image_doc(doc, 42)
    image = decode_image(config_map.binary_data, 42)  # the broker's own reading
    assert (view.topics, view.broker_configs, view.features) == \
        (image.topics, image.broker_configs, image.features)
    assert doc == json.loads((GOLDEN / "image-format-1.json").read_text())


def test_micro_time_keeps_six_fractional_digits_on_a_whole_second() -> None:
    assert micro_time(1_700_000_000_000).isoformat().endswith(".000000+00:00")
    assert epoch_ms(micro_time(1_700_000_000_123)) == 1_700_000_000_123


def test_a_lease_lapses_a_duration_after_its_renewal_was_seen_on_the_reader_s_clock() -> None:
    from kafkube_contract.leases import RenewalClock

    now = [1_000]
    renewals = RenewalClock(lambda: now[0])
    lease = golden("lease-broker.json", "V1Lease")  # renewTime 2026: says nothing here
    assert renewals.renewed(lease) and renewals.expiry_ms(lease) == 1_000 + 9000
    now[0] = 10_000
    assert not renewals.renewed(lease)
    lease.metadata.resource_version = "renewed"  # every write moves it
    assert renewals.renewed(lease) and renewals.expiry_ms(lease) == 10_000 + 9000
    # A renewal of the reader's own holds from when its request was sent.
    assert renewals.seen(lease.metadata.name, "own", at_ms=9_500) == 9_500
    lease.spec.renew_time = None
    assert not renewals.renewed(lease)

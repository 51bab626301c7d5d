"""AlterClientQuotas (49) and DescribeClientQuotas (48) in-process: Kafka's refusals and
messages for bad input, validate_only, removal, and Describe's filters over the image."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.cluster.backend import ClusterImageTooLarge
from broker.cluster.client_quotas import QuotaEntity
from broker.cluster.metadata import ConcurrentUpdate
from broker.handlers import client_quotas  # noqa: F401 (registers)
from broker.handlers.context import BrokerServices
from tests.support.handlers import call, create, make_services, new_topic, request

ALTER, DESCRIBE = 49, 48
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
INVALID = ErrorCode.invalid_request


@pytest.fixture
def services(tmp_path: Path) -> BrokerServices:
    return make_services(tmp_path)


def alter(services: BrokerServices, *entries: tuple[list, list], validate_only: bool = False,
          version: int = 1) -> list[tuple[ErrorCode, str | None]]:
    response = call(services, request(ALTER, version, {"entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None}
                 for k, v in ops]}
        for entity, ops in entries], "validate_only": validate_only}))
    return [(e.error_code, e.error_message) for e in response.entries]


def describe(services: BrokerServices, *components: tuple[str, int, str | None],
             strict: bool = False) -> Any:
    return call(services, request(DESCRIBE, 1, {"components": [
        {"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict}))


def described(services: BrokerServices, *components: tuple[str, int, str | None],
              strict: bool = False) -> dict[tuple, dict[str, float]]:
    response = describe(services, *components, strict=strict)
    assert response.error_code == ErrorCode.none
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in response.entries}


OK = (ErrorCode.none, None)


@pytest.mark.parametrize("version", [0, 1])
def test_quotas_are_set_described_and_removed(services: BrokerServices, version: int) -> None:
    assert alter(services, ([("user", "alice")], [("producer_byte_rate", 1024.0),
                                                  ("request_percentage", 50.0)]),
                 ([("user", None), ("client-id", None)], [("consumer_byte_rate", 2048.0)]),
                 version=version) == [OK, OK]
    assert services.store.image.client_quotas == {
        QuotaEntity.user("alice"): {"producer_byte_rate": 1024.0, "request_percentage": 50.0},
        QuotaEntity.user(None, None): {"consumer_byte_rate": 2048.0}}
    assert described(services, ("user", EXACT, "alice")) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0, "request_percentage": 50.0}}
    assert set(described(services, ("user", SPECIFIED, None))) == {
        (("user", "alice"),), (("user", None), ("client-id", None))}
    assert set(described(services, ("user", SPECIFIED, None), strict=True)) == {
        (("user", "alice"),)}
    assert set(described(services, ("user", DEFAULT, None))) == {
        (("user", None), ("client-id", None))}
    assert described(services, ("client-id", EXACT, "x")) == {}
    assert alter(services, ([("user", "alice")], [("producer_byte_rate", None),
                                                  ("request_percentage", None)])) == [OK]
    assert QuotaEntity.user("alice") not in services.store.image.client_quotas
    assert alter(services, ([("user", "alice")], [("producer_byte_rate", None)])) == [OK]


def test_validate_only_changes_nothing(services: BrokerServices) -> None:
    before = services.store.image
    assert alter(services, ([("user", "bob")], [("producer_byte_rate", 10.0)]),
                 ([("user", "bob"), ("ip", "1.2.3.4")], [("producer_byte_rate", 10.0)]),
                 validate_only=True) == [OK, (INVALID, "Invalid quota entity combination, IP "
                                                       "entity shouldnot be combined with User "
                                                       "or ClientId")]
    assert services.store.image.version == before.version
    assert services.store.image.client_quotas == {}


BAD = {
    "empty entity": (([], [("producer_byte_rate", 1.0)]), "Invalid empty client quota entity"),
    "type twice": (([("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0)]),
                   "Invalid client quota entity, duplicate entity entry user"),
    "unknown type": (([("group", "a")], [("producer_byte_rate", 1.0)]),
                     "Unhandled client quota entity type: group"),
    "empty name": (([("client-id", "")], [("producer_byte_rate", 1.0)]),
                   "Empty client-id not supported"),
    "bad ip": (([("ip", "not an address")], [("connection_creation_rate", 1.0)]),
               "not an address is not a valid IP or resolvable host."),
    "unknown key": (([("user", "a")], [("bytes_per_second", 1.0)]),
                    "Invalid configuration key bytes_per_second"),
    "user key on ip": (([("ip", "10.0.0.1")], [("producer_byte_rate", 1.0)]),
                       "Invalid configuration key producer_byte_rate"),
    "negative": (([("user", "a")], [("producer_byte_rate", -5.0)]),
                 "Quota producer_byte_rate must be greater than 0"),
    "zero": (([("user", "a")], [("controller_mutation_rate", 0.0)]),
             "Quota controller_mutation_rate must be greater than 0"),
    "fraction": (([("user", "a")], [("consumer_byte_rate", 1.5)]),
                 "consumer_byte_rate cannot be a fractional value."),
    "too large": (([("user", "a")], [("producer_byte_rate", 1e20)]),
                  "Proposed value for producer_byte_rate is too large for a LONG."),
    "key twice": (([("user", "a")], [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]),
                  "Duplicate quota key producer_byte_rate not updating quota for this entity "
                  "ClientQuotaEntity(entries={user=a})"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_gets_kafkas_error_and_the_rest_applies(services: BrokerServices,
                                                          case: str) -> None:
    entry, message = BAD[case]
    good = ([("user", "ok")], [("request_percentage", 12.5)])
    assert alter(services, entry, good) == [(INVALID, message), OK]
    assert services.store.image.client_quotas == {
        QuotaEntity.user("ok"): {"request_percentage": 12.5}}


def test_an_entity_named_twice_is_refused_each_time(services: BrokerServices) -> None:
    twice = ([("client-id", "c")], [("producer_byte_rate", 1.0)])
    refused = (INVALID, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c})")
    assert alter(services, twice, twice) == [refused, refused]
    assert services.store.image.client_quotas == {}


def test_ip_quotas_are_stored(services: BrokerServices) -> None:
    assert alter(services, ([("ip", None)], [("connection_creation_rate", 30.0)]),
                 ([("ip", "::1")], [("connection_creation_rate", 5.0)])) == [OK, OK]
    assert set(described(services, ("ip", SPECIFIED, None))) == {
        (("ip", None),), (("ip", "::1"),)}


def test_the_image_keeps_quotas_through_its_document(services: BrokerServices) -> None:
    alter(services, ([("user", "a"), ("client-id", None)], [("producer_byte_rate", 7.0)]))
    image = services.store.image
    again = type(image).from_json(image.to_json(), image.version)
    assert again.client_quotas == image.client_quotas


def test_mutation_quota_refuses_topics_while_in_debt(services: BrokerServices) -> None:
    # ANONYMOUS's client "test-client" (tests.support.handlers): 1 partition a second,
    # a burst of 11.
    alter(services, ([("client-id", "test-client")], [("controller_mutation_rate", 1.0)]))
    first = create(services, 7, new_topic("a", 12))
    assert first.topics[0].error_code == ErrorCode.none  # into debt by one
    refused = create(services, 7, new_topic("b", 1))
    assert (refused.topics[0].error_code, refused.topics[0].error_message) == (
        ErrorCode.throttling_quota_exceeded, "The throttling quota has been exceeded.")
    assert refused.throttle_time.total_seconds() > 0
    permissive = create(services, 5, new_topic("c", 1))  # v5 does not know the error
    assert permissive.topics[0].error_code == ErrorCode.none
    assert permissive.throttle_time.total_seconds() > 0


def test_the_request_that_takes_the_bucket_into_debt_is_throttled(
        services: BrokerServices) -> None:
    """KIP-599: that request is accepted and reports the debt's throttle; the throttle was
    asked before the charge, so it said 0."""
    alter(services, ([("client-id", "test-client")], [("controller_mutation_rate", 1.0)]))
    first = create(services, 7, new_topic("a", 12))  # a burst of 11: into debt by one
    assert first.topics[0].error_code == ErrorCode.none
    assert first.throttle_time.total_seconds() == pytest.approx(1.0, abs=0.05)


def test_a_throttle_beyond_int32_milliseconds_is_clamped(services: BrokerServices) -> None:
    alter(services, ([("client-id", "test-client")], [("controller_mutation_rate", 1e-6)]))
    created = create(services, 7, new_topic("a", 3))  # 3·10^6 s of debt: 3·10^9 ms
    assert created.topics[0].error_code == ErrorCode.none
    assert created.throttle_time == datetime.timedelta(milliseconds=2**31 - 1)


@pytest.mark.parametrize(("error", "code"), [
    (ClusterImageTooLarge("the image would be 1.6 MB"), ErrorCode.policy_violation),
    (ConcurrentUpdate("lost 10 races"), ErrorCode.request_timed_out),  # clients retry it
])
def test_a_failed_write_is_answered_as_the_topic_handlers_answer_it(
        services: BrokerServices, monkeypatch: pytest.MonkeyPatch, error: Exception,
        code: ErrorCode) -> None:
    async def failing(change: Any) -> Any:
        change(services.store.image)
        raise error

    monkeypatch.setattr(services.store, "update", failing)
    bad = ([("user", "a")], [("producer_byte_rate", -5.0)])
    assert alter(services, ([("user", "ok")], [("producer_byte_rate", 10.0)]), bad) == [
        (code, str(error)), (INVALID, "Quota producer_byte_rate must be greater than 0")]
    assert services.store.image.client_quotas == {}

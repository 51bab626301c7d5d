"""The quota math of broker/server/client_quotas.py and the precedence of
broker/cluster/client_quotas.py, on a clock the test moves."""

from __future__ import annotations

import pytest

from broker.cluster.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    QuotaEntity,
    quota_for,
)
from broker.cluster.image import ClusterImage
from broker.common.metrics import BrokerMetrics
from broker.handlers.context import RequestThrottle
from broker.server.client_quotas import ClientQuotaManager, Rate, TokenBucket, user_of


def test_a_new_rate_is_measured_over_at_least_ten_samples() -> None:
    rate = Rate(11, 1.0)
    rate.record(1000, now=100.0)
    assert rate.window(100.5) == 10.0
    assert rate.measure(100.5) == pytest.approx(100.0)


def test_a_rate_spans_its_live_samples_and_forgets_old_ones() -> None:
    rate = Rate(11, 1.0)
    for second in range(30):
        rate.record(500, now=float(second))
    # Samples begun 11 s or more before t=29.5 are gone: 11 left, spanning 10.5 s.
    assert rate.window(29.5) == pytest.approx(10.5)
    assert rate.measure(29.5) == pytest.approx(11 * 500 / 10.5)
    assert rate.measure(100.0) == 0.0


def test_throttle_time_is_what_brings_the_rate_back_to_the_bound() -> None:
    rate = Rate(11, 1.0)
    rate.record(3000, now=0.0)  # 300/s measured over 10 s against 200/s
    throttle = rate.throttle_s(200, now=0.0)
    assert throttle == pytest.approx((300 - 200) / 200 * 10)
    # The same bytes over the window stretched by the throttle are at the bound.
    assert 3000 / (rate.window(0.0) + throttle) == pytest.approx(200)
    assert rate.throttle_s(400, now=0.0) == 0.0


def test_a_throttle_never_exceeds_the_whole_window() -> None:
    rate = Rate(11, 1.0)
    rate.record(10**9, now=0.0)
    assert rate.throttle_s(1, now=0.0) == 11.0


def test_the_mutation_bucket_allows_a_burst_then_refuses_until_repaid() -> None:
    bucket = TokenBucket(rate=2.0, burst_s=11.0)  # 22 tokens
    assert bucket.throttle_s(0.0) == 0.0
    bucket.charge(30, 0.0)  # accepted while not in debt, into debt
    assert bucket.throttle_s(0.0) == pytest.approx(4.0)
    assert bucket.throttle_s(3.0) == pytest.approx(1.0)
    assert bucket.throttle_s(4.0) == 0.0


@pytest.mark.parametrize(("present", "expected"), [
    ((0, 1, 2, 3, 4, 5, 6, 7), 0),
    ((1, 2, 3, 4, 5, 6, 7), 1),
    ((2, 3, 4, 5, 6, 7), 2),
    ((3, 4, 5, 6, 7), 3),
    ((4, 5, 6, 7), 4),
    ((5, 6, 7), 5),
    ((6, 7), 6),
    ((7,), 7),
])
def test_the_most_specific_entity_wins(present: tuple[int, ...], expected: int) -> None:
    entities = [
        QuotaEntity.user("alice", "app"), QuotaEntity.user("alice", None),
        QuotaEntity.user("alice"), QuotaEntity.user(None, "app"),
        QuotaEntity.user(None, None), QuotaEntity.user(None),
        QuotaEntity.client("app"), QuotaEntity.client(None),
    ]
    quotas = {entities[i]: {PRODUCER_BYTE_RATE: float(i + 1)} for i in present}
    match = quota_for(quotas, PRODUCER_BYTE_RATE, "alice", "app")
    assert match is not None and match.entity == entities[expected]
    assert match.bound == expected + 1


def test_each_key_is_looked_up_on_its_own_and_names_its_sensor() -> None:
    quotas = {QuotaEntity.user("alice"): {PRODUCER_BYTE_RATE: 100.0},
              QuotaEntity.user(None, None): {CONSUMER_BYTE_RATE: 50.0}}
    produce = quota_for(quotas, PRODUCER_BYTE_RATE, "alice", "app")
    fetch = quota_for(quotas, CONSUMER_BYTE_RATE, "alice", "app")
    assert produce is not None and (produce.sensor_user, produce.sensor_client_id) == (
        "alice", "")  # shared by all of alice's client-ids
    assert fetch is not None and (fetch.sensor_user, fetch.sensor_client_id) == ("alice", "app")
    assert quota_for(quotas, PRODUCER_BYTE_RATE, "bob", "app") is None
    assert quota_for({}, PRODUCER_BYTE_RATE, "bob", "app") is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_manager_throttles_only_the_client_over_its_quota() -> None:
    image = ClusterImage(client_quotas={QuotaEntity.user("alice"): {PRODUCER_BYTE_RATE: 1000.0}})
    clock = Clock()
    throttled: list[tuple[str, str, str, float]] = []
    quotas = ClientQuotaManager(lambda: image, on_throttle=lambda *a: throttled.append(a),
                                clock=clock)
    assert quotas.record_produce("User:alice", "p1", 5000) == 0  # 500/s over 10 s
    assert quotas.record_produce("User:alice", "p2", 15000) == 10000  # shared: 2000/s
    assert throttled == [("Produce", "alice", "", 10.0)]
    assert quotas.record_produce("User:bob", "p1", 10**8) == 0
    clock.now += 11.0  # every sample gone
    assert quotas.record_produce("User:alice", "p1", 1) == 0
    samples = {(s.quota_type, s.user): s for s in quotas.samples_now()}
    assert samples["Produce", "alice"].bound == 1000.0


def test_request_percentage_is_a_share_of_the_loop() -> None:
    image = ClusterImage(client_quotas={QuotaEntity.client("busy"): {"request_percentage": 10.0}})
    quotas = ClientQuotaManager(lambda: image, clock=Clock())
    assert quotas.record_request_time("User:ANONYMOUS", "busy", 0.5) == 0  # 5 % of 10 s
    assert quotas.record_request_time("User:ANONYMOUS", "busy", 1.5) == 10000


def test_a_new_image_changes_the_quota_at_once() -> None:
    images = [ClusterImage()]
    quotas = ClientQuotaManager(lambda: images[-1], clock=Clock())
    assert quotas.record_fetch("User:a", "c", 10**6) == 0
    images.append(ClusterImage(client_quotas={QuotaEntity.user(None): {CONSUMER_BYTE_RATE: 1.0}}))
    assert quotas.record_fetch("User:a", "c", 100) > 0


def test_the_user_of_a_principal_is_its_name() -> None:
    assert user_of("User:CN=alice") == "CN=alice"
    assert user_of("alice") == "alice"


INT32_MAX = 2**31 - 1


def mutation_quotas(rate: float) -> ClientQuotaManager:
    image = ClusterImage(client_quotas={QuotaEntity.client("admin"): {
        CONTROLLER_MUTATION_RATE: rate}})
    return ClientQuotaManager(lambda: image, clock=Clock())


def test_the_charge_that_takes_the_bucket_into_debt_is_throttled() -> None:
    quotas = mutation_quotas(1.0)  # a burst of 11
    assert quotas.mutation_throttle("User:ANONYMOUS", "admin") == 0
    # KIP-599: accepted, and throttled for the debt it leaves (1 partition at 1/s).
    assert quotas.record_mutations("User:ANONYMOUS", "admin", 12) == 1000
    assert quotas.mutation_throttle("User:ANONYMOUS", "admin") == 1000


def test_no_throttle_exceeds_what_a_response_can_carry() -> None:
    quotas = mutation_quotas(0.001)
    # 100,000 partitions at 0.001/s: 10^8 s of debt, past int32 milliseconds.
    assert quotas.record_mutations("User:ANONYMOUS", "admin", 100_000) == INT32_MAX
    assert quotas.mutation_throttle("User:ANONYMOUS", "admin") == INT32_MAX
    throttle = RequestThrottle()
    assert throttle.add(10**12) == INT32_MAX


def test_nothing_is_matched_or_remembered_while_no_quota_exists() -> None:
    quotas = ClientQuotaManager(ClusterImage, clock=Clock())
    for n in range(1000):  # a client-id per connection
        assert quotas.record_produce("User:ANONYMOUS", f"client-{n}", 100) == 0
    assert quotas.cached_matches == 0


def test_the_match_cache_is_bounded() -> None:
    image = ClusterImage(client_quotas={QuotaEntity.user("alice"): {PRODUCER_BYTE_RATE: 1e6}})
    quotas = ClientQuotaManager(lambda: image, clock=Clock())
    for n in range(10_000):
        quotas.record_produce("User:bob", f"client-{n}", 100)
    assert 0 < quotas.cached_matches <= 4096
    assert quotas.record_produce("User:alice", "x", 10**8) > 0  # still matched


def test_an_idle_sensor_is_dropped_with_its_label_series() -> None:
    image = ClusterImage(client_quotas={QuotaEntity.client(None): {PRODUCER_BYTE_RATE: 10.0}})
    clock, metrics = Clock(), BrokerMetrics()
    quotas = ClientQuotaManager(lambda: image, on_throttle=metrics.throttled, clock=clock,
                                on_forget=metrics.forget_quota_sensor)

    def series(client_id: str) -> float | None:
        return metrics.registry.get_sample_value(
            "kafka_server_quota_throttle_time_seconds_total",
            {"quota_type": "Produce", "user": "", "client_id": client_id})

    assert quotas.record_produce("User:ANONYMOUS", "once", 10**6) > 0
    assert series("once") is not None
    clock.now += 3601.0  # Kafka expires a quota sensor after an hour idle
    assert quotas.record_produce("User:ANONYMOUS", "later", 10**6) > 0
    assert series("once") is None
    assert series("later") is not None
    assert {s.client_id for s in quotas.samples_now()} == {"later"}

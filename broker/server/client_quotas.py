"""Client quotas enforced: byte rates (KIP-13), request time (KIP-124) and controller
mutations (KIP-599), with Kafka's sensor semantics.

A quota bounds a rate measured over ``quota.window.num`` samples of
``quota.window.size.seconds`` each (11 x 1 s by default). A sample starts at the first record
after the previous one ended, so the window slides with the traffic; the rate is what the
live samples hold divided by the time they span, which is counted as at least
``num - 1`` whole samples, so a client that just arrived is measured over 10 s, not over the
few milliseconds it has been sending (Kafka's ``Rate``). A record is always taken (the
request is served); when the rate it leaves is over the bound, the client is throttled for

    (rate - bound) / bound x window

the time after which, sending nothing, its rate is back at the bound. The response says so
(``throttle_time_ms``) and the connection is muted for that time: the broker reads no more of
its requests (KIP-219; broker/frontend/socket_server.py), so TCP holds the client back even
if it ignores the field. A throttle never exceeds the whole window.

* ``producer_byte_rate``: the bytes of each Produce request, per (user, client-id).
* ``consumer_byte_rate``: the bytes of each consumer Fetch response; followers' fetches
  (replication) are exempt, as in Kafka.
* ``request_percentage``: Kafka counts the time request threads spend on a client as a
  percentage of one thread. A broker here has one event loop; a request's time is what it
  held the loop (decoding, and its handler up to its first wait: a long-poll fetch waiting
  for data holds nothing), and 100 % is the whole loop. Exempt: replication, ApiVersions,
  SASL.
* ``controller_mutation_rate``: partitions created or deleted per second by CreateTopics,
  CreatePartitions and DeleteTopics. As in KIP-599 it is a token bucket holding up to
  ``bound x num x window`` mutations: a topic is refused with THROTTLING_QUOTA_EXCEEDED while
  the bucket is in debt, and accepted (and charged, possibly into debt) otherwise; the
  throttle time is the time the debt takes to be repaid, counted after the charge, so the
  request that takes the bucket into debt is accepted and throttled.

Every throttle time is at most what the responses' int32 ``throttle_time_ms`` holds (a
mutation debt has no other bound: 1,000 partitions at 0.01 a second is 100,000 s).

Which quota applies to a client is broker/cluster/client_quotas.py (Kafka's precedence);
usage is kept per sensor as that match names it, and a sensor idle for an hour is dropped,
with its metrics' label series (Kafka expires quota sensors after an hour idle): a client
that picks a new client-id for every connection would otherwise grow them for ever. Matches
are cached for the same reason in a bounded LRU, and not at all while no quota exists.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from broker.cluster.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    Match,
    quota_for,
)
from broker.cluster.image import ClusterImage

SENSOR_IDLE_S = 3600.0
PRUNE_EVERY_S = 60.0
# The (quota type, user, client-id) matches remembered: enough for every live client of a
# broker, and a bound when clients make up a client-id per connection.
MATCH_CACHE_SIZE = 4096
# The largest throttle a response can carry (throttle_time_ms is an int32).
MAX_THROTTLE_MS = 2**31 - 1
# The quota types, as Kafka names its sensors (and the metrics' ``quota_type`` label).
PRODUCE, FETCH, REQUEST, MUTATION = "Produce", "Fetch", "Request", "ControllerMutation"
_KEYS = {PRODUCE: PRODUCER_BYTE_RATE, FETCH: CONSUMER_BYTE_RATE, REQUEST: REQUEST_PERCENTAGE,
         MUTATION: CONTROLLER_MUTATION_RATE}


def user_of(principal: str) -> str:
    """The user a quota names: the principal's name (``User:alice`` → ``alice``)."""
    return principal.partition(":")[2] if ":" in principal else principal


@dataclass(slots=True)
class Rate:
    """A rate per second over ``samples`` samples of ``window_s`` each (Kafka's sampled
    ``Rate``); times are seconds on any monotonic clock."""

    samples: int = 11
    window_s: float = 1.0
    _starts: list[float] = field(default_factory=list)
    _values: list[float] = field(default_factory=list)

    def record(self, value: float, now: float) -> None:
        if not self._starts or now >= self._starts[-1] + self.window_s:
            self._starts.append(now)
            self._values.append(0.0)
        self._values[-1] += value
        self._expire(now)

    def _expire(self, now: float) -> None:
        """Drop the samples begun a whole window (``samples x window_s``) ago or more."""
        horizon = now - self.samples * self.window_s
        while self._starts and self._starts[0] <= horizon:
            del self._starts[0], self._values[0]

    def window(self, now: float) -> float:
        """The time the rate is measured over: since the oldest live sample began, and at
        least ``samples - 1`` whole samples."""
        elapsed = now - self._starts[0] if self._starts else 0.0
        return max(elapsed, (self.samples - 1) * self.window_s)

    def measure(self, now: float) -> float:
        self._expire(now)
        return sum(self._values) / self.window(now)

    def throttle_s(self, bound: float, now: float) -> float:
        """How long the client must send nothing for its rate to be back at ``bound``."""
        rate = self.measure(now)
        if rate <= bound or bound <= 0:
            return 0.0
        return min((rate - bound) / bound * self.window(now), self.samples * self.window_s)


@dataclass(slots=True)
class TokenBucket:
    """KIP-599's bucket: ``rate`` tokens a second, at most ``rate x burst_s`` held; a charge
    may take it below zero, and it is over quota while it is."""

    rate: float
    burst_s: float
    tokens: float | None = None  # None: new, and full
    last: float = 0.0

    def _refill(self, now: float) -> None:
        cap = self.rate * self.burst_s
        if self.tokens is None:
            self.tokens = cap
        else:
            self.tokens = min(cap, self.tokens + (now - self.last) * self.rate)
        self.last = now

    def throttle_s(self, now: float) -> float:
        """0 while the bucket holds tokens; else the time its debt takes to be repaid."""
        self._refill(now)
        assert self.tokens is not None
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def charge(self, amount: float, now: float) -> None:
        self._refill(now)
        assert self.tokens is not None
        self.tokens -= amount


@dataclass(slots=True)
class _Sensor:
    rate: Rate | None
    bucket: TokenBucket | None
    last_used: float


# (quota type, user, client-id, throttle seconds): what the metrics count.
ThrottleListener = Callable[[str, str, str, float], None]
# (quota type, user, client-id) of a sensor dropped after its idle hour: its series go too.
ForgetListener = Callable[[str, str, str], None]


def clamp_ms(ms: float) -> int:
    """A throttle time in whole milliseconds an int32 ``throttle_time_ms`` can carry."""
    return max(0, min(int(ms), MAX_THROTTLE_MS))


@dataclass(frozen=True, slots=True)
class QuotaSample:
    """One sensor's measured rate, for the metrics (per second: bytes, or for Request the
    share of the loop in percent)."""

    quota_type: str
    user: str
    client_id: str
    rate: float
    bound: float


class ClientQuotaManager:
    """Records what clients use against the quotas of the current image; each ``record_*``
    returns the throttle time in milliseconds (0: within quota)."""

    def __init__(self, image: Callable[[], ClusterImage], samples: int = 11,
                 window_s: float = 1.0, controller_samples: int = 11,
                 controller_window_s: float = 1.0,
                 on_throttle: ThrottleListener | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_forget: ForgetListener | None = None) -> None:
        self._image = image
        self.samples, self.window_s = samples, window_s
        self.controller_samples, self.controller_window_s = controller_samples, controller_window_s
        self._on_throttle = on_throttle
        self._on_forget = on_forget
        self._clock = clock
        self._sensors: dict[tuple[str, str, str], _Sensor] = {}
        self._bounds: dict[tuple[str, str, str], float] = {}
        self._matches: OrderedDict[tuple[str, str, str], Match | None] = OrderedDict()
        self._matched_image: ClusterImage | None = None
        self._pruned = clock()

    @property
    def cached_matches(self) -> int:
        """How many matches are remembered (bounded by MATCH_CACHE_SIZE)."""
        return len(self._matches)

    def _match(self, quota_type: str, user: str, client_id: str) -> Match | None:
        """The quota that applies, from an LRU of recent clients: with no quota at all nothing
        is looked up or remembered, so clients cost nothing until a quota exists."""
        image = self._image()
        if image is not self._matched_image:  # a new image: quotas may have changed
            self._matches.clear()
            self._matched_image = image
        if not image.client_quotas:
            return None
        key = (quota_type, user, client_id)
        matches = self._matches
        if key in matches:
            matches.move_to_end(key)
            return matches[key]
        match = matches[key] = quota_for(image.client_quotas, _KEYS[quota_type], user,
                                         client_id)
        if len(matches) > MATCH_CACHE_SIZE:
            matches.popitem(last=False)
        return match

    def _sensor(self, quota_type: str, match: Match, now: float) -> _Sensor:
        key = (quota_type, match.sensor_user, match.sensor_client_id)
        sensor = self._sensors.get(key)
        if sensor is None:
            if quota_type == MUTATION:
                sensor = _Sensor(None, TokenBucket(
                    match.bound, self.controller_samples * self.controller_window_s), now)
            else:
                sensor = _Sensor(Rate(self.samples, self.window_s), None, now)
            self._sensors[key] = sensor
        if sensor.bucket is not None:
            sensor.bucket.rate = match.bound
        self._bounds[key] = match.bound
        sensor.last_used = now
        if now - self._pruned >= PRUNE_EVERY_S:
            self._prune(now)
        return sensor

    def _prune(self, now: float) -> None:
        """Drop the sensors idle for SENSOR_IDLE_S, and their metrics' label series."""
        self._pruned = now
        for key in [k for k, s in self._sensors.items() if now - s.last_used > SENSOR_IDLE_S]:
            del self._sensors[key]
            self._bounds.pop(key, None)
            if self._on_forget is not None:
                self._on_forget(*key)

    def _record(self, quota_type: str, user: str, client_id: str, value: float,
                bound_scale: float = 1.0) -> int:
        match = self._match(quota_type, user, client_id)
        if match is None:
            return 0
        now = self._clock()
        sensor = self._sensor(quota_type, match, now)
        assert sensor.rate is not None
        sensor.rate.record(value, now)
        return self._report(quota_type, match,
                            sensor.rate.throttle_s(match.bound * bound_scale, now))

    def _report(self, quota_type: str, match: Match, throttle_s: float) -> int:
        """The throttle in milliseconds, clamped to what a response carries; counted."""
        ms = clamp_ms(throttle_s * 1000)
        if ms > 0 and self._on_throttle is not None:
            self._on_throttle(quota_type, match.sensor_user, match.sensor_client_id, ms / 1000)
        return ms

    def record_produce(self, principal: str, client_id: str, size: int) -> int:
        return self._record(PRODUCE, user_of(principal), client_id, size)

    def record_fetch(self, principal: str, client_id: str, size: int) -> int:
        return self._record(FETCH, user_of(principal), client_id, size)

    def record_request_time(self, principal: str, client_id: str, seconds: float) -> int:
        """``seconds`` the request held the event loop; the bound is a percentage of it."""
        return self._record(REQUEST, user_of(principal), client_id, seconds, 0.01)

    def mutation_throttle(self, principal: str, client_id: str) -> int:
        """The throttle of a client whose mutation bucket is in debt (0: it may mutate):
        asked before each mutation, which is refused while it is not 0 (KIP-599)."""
        match = self._match(MUTATION, user_of(principal), client_id)
        if match is None:
            return 0
        now = self._clock()
        bucket = self._sensor(MUTATION, match, now).bucket
        assert bucket is not None
        return self._report(MUTATION, match, bucket.throttle_s(now))

    def record_mutations(self, principal: str, client_id: str, count: int) -> int:
        """Charge ``count`` partitions created or deleted; the throttle the charge leaves
        (KIP-599: the request that takes the bucket into debt is accepted and throttled)."""
        match = self._match(MUTATION, user_of(principal), client_id)
        if match is None or count <= 0:
            return 0
        now = self._clock()
        bucket = self._sensor(MUTATION, match, now).bucket
        assert bucket is not None
        bucket.charge(count, now)
        return self._report(MUTATION, match, bucket.throttle_s(now))

    def samples_now(self) -> Iterator[QuotaSample]:
        """Each live sensor's rate, read when the metrics are scraped."""
        now = self._clock()
        for (quota_type, user, client_id), sensor in list(self._sensors.items()):
            bound = self._bounds.get((quota_type, user, client_id), 0.0)
            if sensor.rate is not None:
                rate = sensor.rate.measure(now) * (100.0 if quota_type == REQUEST else 1.0)
            else:
                assert sensor.bucket is not None
                rate = sensor.bucket.tokens or 0.0
            yield QuotaSample(quota_type, user, client_id, rate, bound)

"""DescribeClientQuotas on the wire, on a broker where no quota was set: a valid filter
matches nothing, and a bad filter gets Kafka's error and message (ClientQuotasImage.describe).
Quotas set and enforced: test_client_quota_enforcement.py."""

from __future__ import annotations

import pytest
from kio.schema.describe_client_quotas.v1.request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kio.schema.errors import ErrorCode

from kafkube.harness.wire import WireClient

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def component(entity_type: str, match_type: int, match: str | None = None) -> ComponentData:
    return ComponentData(entity_type=entity_type, match_type=match_type, match=match)


@pytest.mark.parametrize("components", [
    (),
    (component("user", EXACT, "alice"),),
    (component("user", DEFAULT), component("client-id", SPECIFIED)),
    (component("ip", SPECIFIED),),
], ids=["all", "one-user", "default-user-any-client", "any-ip"])
def test_a_valid_filter_matches_nothing(broker, components) -> None:
    with WireClient.connect(broker.bootstrap) as client:
        for strict in (False, True):
            response = client.request(DescribeClientQuotasRequest(components=components,
                                                                  strict=strict))
            assert (response.error_code, response.error_message, response.entries) == (
                ErrorCode.none, None, ())


INVALID = ErrorCode.invalid_request
BAD_FILTERS = {
    "empty type": ((component("", EXACT, "x"),), INVALID, "Invalid empty entity type."),
    "type twice": ((component("user", EXACT, "a"), component("user", SPECIFIED)), INVALID,
                   "Entity type user cannot appear more than once in the filter."),
    "unknown type": ((component("group", SPECIFIED),), ErrorCode.unsupported_version,
                     "Unsupported entity type group"),
    "exact without name": ((component("user", EXACT),), INVALID,
                           "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    "default with name": ((component("user", DEFAULT, "a"),), INVALID,
                          "Request specified MATCH_TYPE_DEFAULT, but also specified a match "
                          "string."),
    "specified with name": ((component("client-id", SPECIFIED, "a"),), INVALID,
                            "Request specified MATCH_TYPE_SPECIFIED, but also specified a "
                            "match string."),
    "unknown match type": ((component("user", 7),), INVALID, "Unknown match type 7"),
    "ip with user": ((component("ip", SPECIFIED), component("user", DEFAULT)), INVALID,
                     "Invalid entity filter component combination. IP filter component should "
                     "not be used with user or clientId filter component."),
}


def test_a_bad_filter_gets_kafkas_error(broker) -> None:
    with WireClient.connect(broker.bootstrap) as client:
        for name, (components, code, message) in BAD_FILTERS.items():
            response = client.request(DescribeClientQuotasRequest(components=components,
                                                                  strict=False))
            assert (response.error_code, response.error_message, response.entries) == (
                code, message, None), name

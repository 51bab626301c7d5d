"""Fixtures of the ACL tests of the group and admin APIs: one broker with SASL/PLAIN
listeners and the StandardAuthorizer, and AdminClients logged in as admin and as alice."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from kafkube.harness.metadata import Cluster
from tests.integration.acl.sasl_admin import AUTHORIZER, as_admin, as_alice
from tests.support.security_setup import make_pki, secure_listeners


@pytest.fixture
def cluster(cluster_factory, tmp_path) -> Cluster:
    return cluster_factory(1, {**secure_listeners(make_pki(tmp_path / "pki")), **AUTHORIZER})


@pytest.fixture
def admin(cluster: Cluster) -> AdminClient:
    return AdminClient(as_admin(cluster))


@pytest.fixture
def alice(cluster: Cluster) -> AdminClient:
    return AdminClient(as_alice(cluster))

"""The operator tests' side of the API server: a namespace of the test's own, operators
started in it (``kafkube operator`` processes, their output attached to a failure by the
report hook of tests/support/brokers.py), and our custom resources read and written through
the real API server, as fixtures (registered by tests/conftest.py) and helpers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from kafkube.harness.waiting import wait_until
from tests.support.operator_process import OperatorProcess

GROUP, VERSION = "kafkube.io", "v1alpha1"


@pytest.fixture
def namespace(crd_api: k8s.ApiClient) -> Iterator[str]:
    name = f"op-{uuid.uuid4().hex[:8]}"
    core = k8s.CoreV1Api(crd_api)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def operators(request: pytest.FixtureRequest, control_plane: Any,
              namespace: str) -> Iterator[list[OperatorProcess]]:
    """Start operators with ``operators.append(OperatorProcess(...))``; stopped at the end,
    their output attached to a failure (tests/support/brokers.py's report hook)."""
    started: list[OperatorProcess] = []
    request.node._kafkube_operators = started
    yield started
    for operator in started:
        if operator.alive():
            operator.stop()


class Resources:
    """One kind of ours in the test's namespace, through the real API server."""

    def __init__(self, api: k8s.ApiClient, namespace: str, kind: str, plural: str) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self.namespace, self.kind, self.plural = namespace, kind, plural

    def create(self, name: str, spec: dict) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": self.kind,
                "metadata": {"name": name}, "spec": spec}
        return self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, self.plural, body)

    def get(self, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, self.plural, name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def patch(self, name: str, spec: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, self.plural, name, {"spec": spec})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, self.plural, name)

    def status_when(self, name: str, predicate, timeout: float, what: str) -> dict:
        def check() -> dict | None:
            status = (self.get(name) or {}).get("status") or {}
            return status if predicate(status) else None

        return wait_until(check, timeout, what)


def kafka_clusters(api: k8s.ApiClient, namespace: str) -> Resources:
    return Resources(api, namespace, "KafkaCluster", "kafkaclusters")


def topic_resources(api: k8s.ApiClient, namespace: str) -> Resources:
    return Resources(api, namespace, "Topic", "topics")


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def events_of(api: k8s.ApiClient, namespace: str, name: str, kind: str = "KafkaCluster"
              ) -> list[tuple[str, str, str]]:
    found = k8s.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={kind}")
    return [(e.type, e.reason, e.message) for e in found.items]


def statefulset_or_none(apps: k8s.AppsV1Api, namespace: str, name: str) -> Any:
    """The StatefulSet ``name``, or None while it does not exist (not made yet, deleted)."""
    try:
        return apps.read_namespaced_stateful_set(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise

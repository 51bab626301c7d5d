"""The Helm chart (charts/kafkube-operator), the install bundle and the examples: `helm lint`
clean, values outside values.schema.json refused, the CRDs taken from crds/, the bundle in
step with the chart, and every object of every manifest accepted by a real API server in a
server-side dry run (its schema, its CEL rules, its admission), the Prometheus Operator's kinds
against that project's own CRDs."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from kafkube.harness.waiting import wait_until
from kafkube_operator.kube import ApplyError, Kube
from kafkube_operator.model.cluster import ClusterRef, desired_cluster, role
from tests.support import REPO

CHART = REPO / "charts" / "kafkube-operator"
BUNDLE = REPO / "deploy" / "kafkube-operator.yaml"
EVERY_OPTION = ["--set", "metrics.serviceMonitor.enabled=true",
                "--set", "metrics.podMonitor.enabled=true",
                "--set", "grafanaDashboard.enabled=true",
                "--set", "watchNamespaces={kafka,team-a}"]


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)


@pytest.fixture(scope="module")
def helm() -> str:
    built = run("bash", "scripts/helm.sh")
    assert built.returncode == 0, built.stderr
    return built.stdout.strip()


def render(helm: str, *options: str) -> list[dict]:
    out = run(helm, "template", "kafkube-operator", str(CHART), "--namespace", "kafkube-system",
              "--include-crds", "--kube-version", "1.35.0", *options)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.parametrize("options", [[], EVERY_OPTION], ids=["defaults", "every-option"])
def test_the_chart_lints_clean(helm: str, options: list[str]) -> None:
    out = run(helm, "lint", str(CHART), "--strict", *options)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize(("setting", "complaint"), [
    ("replicas=0", "/replicas"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("watchNamespaces=kafka", "/watchNamespaces"),
    ("metrics.port=70000", "/metrics/port"),
    ("replica=2", "additional properties 'replica' not allowed"),
])
def test_values_outside_the_schema_are_refused_with_the_path(helm: str, setting: str,
                                                             complaint: str) -> None:
    out = run(helm, "template", str(CHART), "--kube-version", "1.35.0", "--set", setting)
    assert out.returncode != 0
    assert complaint in out.stderr, out.stderr


def test_the_chart_installs_the_crds_of_crds(helm: str) -> None:
    rendered = [d for d in render(helm) if d["kind"] == "CustomResourceDefinition"]
    ours = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "crds").glob("*.yaml"))]
    assert sorted(rendered, key=lambda d: d["metadata"]["name"]) == \
        sorted(ours, key=lambda d: d["metadata"]["name"])


def test_the_install_bundle_is_the_rendered_chart(helm: str) -> None:
    out = run("bash", "scripts/bundle.sh")
    assert out.returncode == 0, out.stderr
    assert out.stdout == BUNDLE.read_text(), ("deploy/kafkube-operator.yaml is stale: "
                                             "bash scripts/bundle.sh > " + str(BUNDLE))


def test_the_operator_holds_every_permission_it_uses_and_grants() -> None:
    """Kubernetes lets a subject create a Role only with permissions it holds itself, and the
    operator applies every kind of the cluster model: each needs a rule in its ClusterRole."""
    docs = [d for d in yaml.safe_load_all(BUNDLE.read_text()) if d]
    (operator_role,) = [d for d in docs if d["kind"] == "ClusterRole"
                        and d["metadata"]["name"] == "kafkube-operator"]

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                   for r in operator_role["rules"])

    model = desired_cluster({"metadata": {"name": "x", "namespace": "n", "uid": "u"},
                             "spec": {}})
    plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
              "ClusterRoleBinding": "clusterrolebindings", "ConfigMap": "configmaps",
              "Service": "services", "PodDisruptionBudget": "poddisruptionbudgets",
              "StatefulSet": "statefulsets"}
    for obj in model.objects:
        group = obj["apiVersion"].rpartition("/")[0]
        for verb in ("get", "create", "patch", "delete"):
            assert allowed(group, plural[obj["kind"]], verb), (obj["kind"], verb)
    for rule in role(ClusterRef("x", "n", "u"))["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert allowed(group, resource, verb), (group, resource, verb)
    assert allowed("", "nodes", "get")  # to bind kafkube-broker-nodes to the brokers
    # storage.size grown: each claim's request is patched (reconcile/cluster_apply.py), then
    # claims of removed brokers are deleted (scale down).
    for verb in ("list", "patch", "delete"):
        assert allowed("", "persistentvolumeclaims", verb), verb


@pytest.fixture(scope="module")
def kube(crd_api: k8s.ApiClient) -> Iterator[Kube]:
    """Our CRDs, the Prometheus Operator's ServiceMonitor and PodMonitor and the Spark
    Operator's SparkApplication installed, and the namespaces the manifests name."""
    out = run("bash", "scripts/third_party_crds.sh")
    assert out.returncode == 0, out.stderr
    kube = Kube(crd_api)
    extensions = k8s.ApiextensionsV1Api(crd_api)
    for path in sorted(Path(out.stdout.strip()).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kube.apply(crd)

        def established(name: str = crd["metadata"]["name"]) -> bool:
            found = extensions.read_custom_resource_definition(name).status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in found)

        wait_until(established, 30, f"{path.name} established")
    core = k8s.CoreV1Api(crd_api)
    for name in ("kafkube-system", "kafka", "team-a"):
        if not core.list_namespace(field_selector=f"metadata.name={name}").items:
            core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield kube


def dry_run_all(kube: Kube, docs: list[dict], namespace: str | None = None) -> list[str]:
    """Server-side dry run of each object; the kinds accepted (an error fails the test)."""
    accepted = []
    for doc in docs:
        if namespace and doc["kind"] not in ("CustomResourceDefinition", "Namespace",
                                             "ClusterRole", "ClusterRoleBinding"):
            doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
        kube.apply(doc, dry_run=True)
        accepted.append(doc["kind"])
    return accepted


def test_the_bundle_and_every_chart_option_are_accepted_by_the_api_server(
        kube: Kube, helm: str) -> None:
    bundle = [d for d in yaml.safe_load_all(BUNDLE.read_text()) if d]
    assert sorted(dry_run_all(kube, bundle)) == sorted([
        "Namespace", "CustomResourceDefinition", "CustomResourceDefinition",
        "CustomResourceDefinition", "CustomResourceDefinition", "ServiceAccount",
        "ClusterRole", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment"])
    every = dry_run_all(kube, render(helm, *EVERY_OPTION))
    assert {"ServiceMonitor", "PodMonitor", "ConfigMap"} <= set(every)


def test_the_examples_and_the_operator_golden_files_are_accepted_by_the_api_server(
        kube: Kube) -> None:
    namespace = f"ex-{uuid.uuid4().hex[:6]}"
    k8s.CoreV1Api(kube.api).create_namespace(
        k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    examples = [d for p in sorted((REPO / "examples").glob("*.yaml"))
                for d in yaml.safe_load_all(p.read_text()) if d]
    assert {"KafkaCluster", "Topic"} <= set(dry_run_all(kube, examples, namespace))
    for golden in sorted((REPO / "tests" / "unit" / "operator" / "golden").glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(golden.read_text()) if d]
        assert "StatefulSet" in dry_run_all(kube, docs), golden.name


def test_the_spark_manifests_are_accepted_by_the_api_server(kube: Kube) -> None:
    """spark/k8s against the Kubeflow Spark Operator's own SparkApplication CRD and the core
    kinds: a field the CRD does not know is refused, not dropped."""
    namespace = f"spark-{uuid.uuid4().hex[:6]}"
    k8s.CoreV1Api(kube.api).create_namespace(
        k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    # Every manifest (the Spark Operator chart's values file aside: no object of its own).
    docs = [d for p in sorted((REPO / "spark" / "k8s").glob("*.yaml"))
            if not p.name.endswith(".values.yaml")
            for d in yaml.safe_load_all(p.read_text()) if d]
    assert sorted(dry_run_all(kube, docs, namespace)) == sorted([
        "Secret", "Service", "StatefulSet", "NetworkPolicy", "ServiceAccount", "Role",
        "RoleBinding", "Role", "RoleBinding", "SparkApplication", "SparkApplication", "Topic"])
    app = next(d for d in docs if d["kind"] == "SparkApplication")
    wrong = {**app, "spec": {**app["spec"], "driver": {**app["spec"]["driver"], "cores": "x"}}}
    with pytest.raises(ApplyError, match="cores"):
        dry_run_all(kube, [wrong], namespace)


def test_the_examples_configs_are_all_applied() -> None:
    """The example clusters' spec.config holds only keys the brokers accept: no Warning for a
    user who starts from them."""
    for path in sorted((REPO / "examples").glob("kafkacluster*.yaml")):
        resource = yaml.safe_load(path.read_text())
        resource["metadata"].update(namespace="kafka", uid="u")
        assert desired_cluster(resource).refused_config == {}, path.name

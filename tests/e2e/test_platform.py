"""Smoke tests of the e2e platform itself (scripts/kind.sh): what the Kafka scenarios rely on.

Each one can fail: nodes and zones, the project's image running in a pod, cross-node pod
traffic through a Service name (CoreDNS + kube-proxy + the pod routes `up` installs), and the
default StorageClass provisioning a volume a pod writes to.
"""

from __future__ import annotations

import json

import pytest

from kafkube.harness.kind.platform import Cluster, KubectlError

IMAGE = "localhost/kafkube:dev"
ZONE = "topology.kubernetes.io/zone"
ZONES = ["zone-a", "zone-b", "zone-c"]

# Answers every connection with the node it runs on.
SERVER = """
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", 7000))
s.listen()
while True:
    c, _ = s.accept()
    c.sendall(("hello from " + os.environ["NODE"] + "\\n").encode())
    c.close()
"""

# Resolves and connects to each name given, retrying for a bounded time; one line per name.
CLIENT = """
import socket, sys, time
for host in sys.argv[1:]:
    deadline = time.monotonic() + 90
    while True:
        try:
            addr = socket.gethostbyname(host)
            with socket.create_connection((host, 7000), timeout=5) as c:
                print(host, addr, c.makefile().readline().strip(), flush=True)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise SystemExit(f"{host}: {e}")
            time.sleep(1)
"""


def nodes(cluster: Cluster) -> list[dict]:
    return json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]


def worker_zones(cluster: Cluster) -> list[str]:
    """The zones of the worker nodes (not the control plane), sorted."""
    return sorted(n["metadata"]["labels"][ZONE] for n in nodes(cluster)
                  if "node-role.kubernetes.io/control-plane" not in n["metadata"]["labels"])


def wait_succeeded(cluster: Cluster, ns: str, pod: str, timeout: int = 240) -> str:
    """Waits for the pod to finish successfully; its logs. On failure, says what happened."""
    try:
        cluster.kubectl("-n", ns, "wait", f"pod/{pod}", "--for=jsonpath={.status.phase}=Succeeded",
                        f"--timeout={timeout}s", timeout=timeout + 30)
    except KubectlError as e:
        detail = cluster.run_in_netns(
            [cluster.kubectl_bin, "-n", ns, "describe", "pod", pod], check=False).stdout
        logs = cluster.run_in_netns(
            [cluster.kubectl_bin, "-n", ns, "logs", pod], check=False)
        pytest.fail(f"pod {pod} did not succeed: {e}\n{detail[-3000:]}\n"
                    f"logs: {logs.stdout[-2000:]}{logs.stderr[-500:]}")
    return cluster.kubectl("-n", ns, "logs", pod)


def pod(name: str, zone: str, command: list[str], **extra: object) -> dict:
    """A pod of the project's image (never pulled) pinned to one zone."""
    container = {"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": command,
                 "env": [{"name": "NODE",
                          "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}
    container.update(extra.pop("container", {}))
    spec = {"nodeSelector": {ZONE: zone}, "restartPolicy": "Never", "containers": [container],
            "terminationGracePeriodSeconds": 1, **extra}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


def test_a_control_plane_and_three_workers_in_three_zones(kind_cluster: Cluster) -> None:
    items = nodes(kind_cluster)
    assert len(items) == 4
    for node in items:
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["metadata"]["name"]
    assert worker_zones(kind_cluster) == ZONES
    # Brokers run on the workers only: the control plane keeps its NoSchedule taint.
    planes = [n for n in items
              if "node-role.kubernetes.io/control-plane" in n["metadata"]["labels"]]
    assert len(planes) == 1
    assert [t["effect"] for t in planes[0]["spec"].get("taints") or []] == ["NoSchedule"]


def test_pods_on_every_node_reach_a_service_on_a_worker(
        kind_cluster: Cluster, kube_namespace: str) -> None:
    """One client per zone: two CoreDNS replicas cover at most two nodes, so at least one
    client's lookups cross nodes, and at least two clients' connections do."""
    ns = kube_namespace
    server_zone = worker_zones(kind_cluster)[0]
    server = pod("echo", server_zone, ["python3", "-c", SERVER],
                 container={"readinessProbe": {"tcpSocket": {"port": 7000},
                                               "periodSeconds": 1}})
    server["spec"]["restartPolicy"] = "Always"
    services = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
         "spec": {"selector": {"app": "echo"}, "ports": [{"port": 7000}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo-direct"},
         "spec": {"clusterIP": "None", "selector": {"app": "echo"}, "ports": [{"port": 7000}]}},
    ]
    # The image's own command works, then: ClusterIP (kube-proxy) and pod IP (headless).
    clients = [pod(f"client-{zone}", zone, [
        "sh", "-c", 'kafkube --help >/dev/null && exec python3 -c "$0" "$@"', CLIENT,
        "echo", f"echo-direct.{ns}.svc.cluster.local"]) for zone in ZONES]
    kind_cluster.apply(json.dumps({"apiVersion": "v1", "kind": "List",
                                   "items": [server, *services, *clients]}), namespace=ns)
    outputs = {c["metadata"]["name"]: wait_succeeded(kind_cluster, ns, c["metadata"]["name"])
               for c in clients}

    placed = json.loads(kind_cluster.kubectl("-n", ns, "get", "pods", "-o", "json"))["items"]
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in placed}
    server_ip = next(p["status"]["podIP"] for p in placed if p["metadata"]["name"] == "echo")
    cluster_ip = kind_cluster.kubectl("-n", ns, "get", "service", "echo",
                                      "-o", "jsonpath={.spec.clusterIP}")
    assert len({where[name] for name in outputs}) == 3
    for name, out in outputs.items():
        assert out.splitlines() == [
            f"echo {cluster_ip} hello from {where['echo']}",
            f"echo-direct.{ns}.svc.cluster.local {server_ip} hello from {where['echo']}",
        ], name


def test_default_storage_class_provisions_a_writable_volume(
        kind_cluster: Cluster, kube_namespace: str) -> None:
    ns = kube_namespace
    classes = json.loads(kind_cluster.kubectl("get", "storageclass", "-o", "json"))["items"]
    default = [c["metadata"]["name"] for c in classes if c["metadata"].get("annotations", {})
               .get("storageclass.kubernetes.io/is-default-class") == "true"]
    assert len(default) == 1, classes
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
             "spec": {"accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "16Mi"}}}}
    # As the brokers run: uid 1000, fsGroup 1000.
    writer = pod("writer", worker_zones(kind_cluster)[0],
                 ["sh", "-c", "echo written-by-$(id -u) > /data/probe && sync && cat /data/probe"],
                 container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                 volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
                 securityContext={"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000})
    kind_cluster.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": [claim, writer]}),
                       namespace=ns)
    assert wait_succeeded(kind_cluster, ns, "writer").strip() == "written-by-1000"
    pvc = json.loads(kind_cluster.kubectl("-n", ns, "get", "pvc", "data", "-o", "json"))
    assert pvc["status"]["phase"] == "Bound"
    assert pvc["spec"]["storageClassName"] == default[0]

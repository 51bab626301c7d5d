"""The reference deployment (deploy/kafkube.yaml) on a cluster, and the client pods run
against it (tests/e2e/workload.py): what the e2e scenarios and `bench failover --kubernetes`
drive."""

from __future__ import annotations

import json
import uuid

from kafkube.harness.checkout import REPO
from kafkube.harness.kind.platform import Cluster, KubectlError
from kafkube.harness.waiting import WaitTimedOut, wait_until
from kafkube_operator.model.broker_config import HEALTH_PORT, METRICS_PORT

NAMESPACE = "kafkube"  # the reference manifest's ClusterRoleBinding names it
BOOTSTRAP = f"kafkube-bootstrap.{NAMESPACE}.svc:9092"
WORKLOAD_IMAGE = "localhost/kafkube-workload:dev"
BROKERS = 3


class Brokers:
    """The deployed brokers (the reference deployment, or a KafkaCluster's StatefulSet, both
    named after their cluster), and the client pods run against them."""

    def __init__(self, cluster: Cluster, namespace: str = NAMESPACE, name: str = "kafkube",
                 size: int = BROKERS) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.size = size
        self.bootstrap = f"{name}-bootstrap.{namespace}.svc:9092"

    def kubectl(self, *args: str, **kw) -> str:
        return self.cluster.kubectl("-n", self.namespace, *args, **kw)

    # -- client pods -----------------------------------------------------------------------

    def start(self, *args: str) -> str:
        """A client pod running tests/e2e/workload.py with ARGS; its name."""
        # Without a request the pod is BestEffort, the lowest CPU weight there is: on 2 busy
        # cores the failover probe then stalled for up to 20 s between two sends, which the
        # bench took for unavailability.
        return self.start_pod({"image": WORKLOAD_IMAGE, "args": list(args),
                               "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}})

    def start_pod(self, container: dict) -> str:
        """A client pod of one container (image, command or args, env, resources: the rest
        is filled in), run once; its name, for `finish`."""
        name = f"client-{uuid.uuid4().hex[:8]}"
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kafkube.io/e2e": "client"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 120,
                     "containers": [{"name": "client", "imagePullPolicy": "IfNotPresent",
                                     **container}]},
        }
        self.cluster.apply(json.dumps(pod), namespace=self.namespace)
        return name

    def phase(self, pod: str) -> str:
        return self.kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase}")

    def wait_running(self, pod: str, timeout: float) -> None:
        wait_until(lambda: self.phase(pod) == "Running", timeout, f"client pod {pod} running",
                   1.0)

    def logs(self, pod: str) -> list[str]:
        return self.kubectl("logs", pod, timeout=300).splitlines()

    def ended(self, pod: str, timeout: float) -> tuple[bool, list[str]]:
        """Wait for a client pod to end, then delete it; whether it succeeded, its output."""
        phase = wait_until(lambda: (p := self.phase(pod)) in ("Succeeded", "Failed") and p,
                           timeout, f"client pod {pod} to finish", 1.0)
        lines = self.logs(pod)
        self.kubectl("delete", "pod", pod, "--wait=false")
        return phase == "Succeeded", lines

    def finish(self, pod: str, timeout: float) -> list[str]:
        """Wait for a client pod to end; its output. It must have succeeded."""
        succeeded, lines = self.ended(pod, timeout)
        assert succeeded, f"client pod {pod} failed:\n" + "\n".join(lines[-20:])
        return lines

    def run(self, *args: str, timeout: float = 300) -> list[str]:
        return self.finish(self.start(*args), timeout)

    def create_topic(self, topic: str, partitions: int) -> None:
        self.run("create-topic", self.bootstrap, topic, "--partitions", str(partitions),
                 "--replication-factor", "3", "--config", "min.insync.replicas=2")

    def describe(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """Partition -> (leader, replicas, ISR)."""
        out = {}
        for line in self.run("describe", self.bootstrap, topic, timeout=120):
            if line.startswith("P "):
                _, p, leader, replicas, isr = line.split()
                out[int(p)] = (int(leader), [int(r) for r in replicas.split(",")],
                               [int(r) for r in isr.split(",") if r])
        return out

    # -- the brokers -----------------------------------------------------------------------

    def leases(self) -> dict[str, dict]:
        items = json.loads(self.kubectl("get", "leases", "-o", "json"))["items"]
        return {lease["metadata"]["name"]: lease for lease in items}

    def controller(self) -> int:
        return int(self.leases()[f"{self.name}-controller"]["spec"]["holderIdentity"])

    def controller_other_than(self, victim: int, timeout: float = 120) -> int:
        """Wait for a broker other than ``victim`` to hold the controller Lease; its id."""
        def other() -> tuple[int] | None:  # a tuple: broker 0 is falsy
            try:
                holder = self.controller()
            except (KeyError, KubectlError):
                return None
            return (holder,) if holder != victim else None

        return wait_until(other, timeout, "another broker to take the controller Lease", 1.0)[0]

    def ready_pods(self) -> set[str]:
        pods = json.loads(self.kubectl(
            "get", "pods", "-l", f"app.kubernetes.io/name=kafkube,kafkube.io/cluster={self.name}",
            "-o", "json"))["items"]
        return {p["metadata"]["name"] for p in pods
                if p["metadata"].get("deletionTimestamp") is None
                and any(c["type"] == "Ready" and c["status"] == "True"
                        for c in p["status"].get("conditions", []))}

    def get_in_pod(self, pod: str, port: int, path: str, any_status: bool = False) -> str:
        """The body of GET http://127.0.0.1:PORT/PATH inside ``pod`` (kubectl exec; the
        ports are not published); with ``any_status`` an error's body too (/ready answers
        503 with its reason), else an error status fails the exec (KubectlError)."""
        caught = "e.HTTPError" if any_status else "()"
        return self.kubectl("exec", pod, "--", "python3", "-c", (
            "import urllib.request as u, urllib.error as e\n"
            f"try: print(u.urlopen('http://127.0.0.1:{port}{path}', timeout=10).read()"
            ".decode())\n"
            f"except {caught} as x: print(x.read().decode())"), timeout=60)

    def metrics(self, broker: int) -> dict[str, float]:
        text = self.get_in_pod(f"{self.name}-{broker}", METRICS_PORT, "/metrics")
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def crash(self, broker: int) -> None:
        """SIGKILL the broker's process from its node, as a crash would (an OOM kill, a
        segfault): no SIGTERM, no controlled shutdown, the pod object untouched; the kubelet
        sees the container end and starts it again in the same pod."""
        pod = f"{self.name}-{broker}"
        node = self.kubectl("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}")
        # The node's /proc holds its pods' processes; the broker's has POD_NAME=<pod>.
        killed = self.cluster.on_node(node, "sh", "-c", (
            "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null | "
            f"grep -qx POD_NAME={pod} && kill -9 ${{p#/proc/}} && echo ${{p#/proc/}}; done;"
            " exit 0"))
        assert killed.split(), f"no process of pod {pod} found on node {node}"

    def why_not_ready(self) -> str:
        """Each broker's own answer to its readiness probe (broker/health.py says which
        partitions it waits for) and the end of its log, the ready ones' too (a follower
        waits on its leader): what a wedge is read from."""
        lines = []
        for pod in (f"{self.name}-{b}" for b in range(self.size)):
            try:
                reason = self.get_in_pod(pod, HEALTH_PORT, "/ready", any_status=True).strip()
            except KubectlError as e:
                reason = f"(not asked: {e})"
            try:
                tail = self.kubectl("logs", pod, "--tail=80", timeout=30)
            except KubectlError as e:
                tail = f"(no log: {e})"
            lines.append(f"--- {pod}: {reason}\n{tail}")
        return "\n".join(lines)

    def wait_whole(self, timeout: float = 300) -> None:
        """Every broker Ready and no partition under-replicated, as each broker sees it."""
        try:
            wait_until(lambda: len(self.ready_pods()) == self.size, timeout,
                       f"{self.size} Ready broker pods", 1.0)
        except WaitTimedOut as e:
            raise WaitTimedOut(f"{e}\n{self.why_not_ready()}") from None

        def in_sync() -> bool:
            try:
                return all(self.metrics(b).get(
                    "kafka_server_replicamanager_underreplicatedpartitions") == 0
                    for b in range(self.size))
            except KubectlError:
                return False
        wait_until(in_sync, timeout, "no under-replicated partition on any broker", 2)



def deploy(cluster: Cluster, timeout: float = 600) -> Brokers:
    """The reference deployment in its namespace, every broker Ready and in sync."""
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.apply((REPO / "deploy" / "kafkube.yaml").read_text(), namespace=NAMESPACE)
    deployed = Brokers(cluster)
    deployed.wait_whole(timeout)
    return deployed


def undeploy(cluster: Cluster) -> None:
    """What was deployed, printed for the record, then its namespace deleted."""
    for what in ("pods", "statefulset", "leases", "configmaps"):
        try:
            print(cluster.kubectl("-n", NAMESPACE, "get", what, "-o", "wide"))
        except KubectlError as e:
            print(e)
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
    # The cluster-scoped part (the zone lookup) has no namespace to go with.
    cluster.kubectl("delete", "clusterrolebinding,clusterrole", "kafkube-reference-nodes",
                    "--ignore-not-found")

"""The faults of ``python -m bench chaos`` (bench/chaos.py) on a kind cluster of the e2e
platform (kafkube/harness/kind/platform.py), each done and undone here, and the wait for the
cluster to be whole again after it.

Every fault that leaves something behind (a frozen node, a stopped API server, firewall
rules) undoes it in a ``finally``, and ``heal_all`` undoes every kind of them on every node
once more at the end of a run, so an interrupted run (Ctrl-C, SIGTERM, a failed kubectl)
leaves no node frozen and no rule in place. Firewall rules live in one chain of their own
(``KAFKUBE-CHAOS``) jumped to from INPUT, OUTPUT and FORWARD of the node's network namespace
(a kind node is a container: its pods' traffic to other nodes is forwarded there), so
removing them never touches kube-proxy's rules.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafkube.harness.kind.deployment import Brokers
from kafkube.harness.kind.operated import OPERATOR_NAMESPACE
from kafkube.harness.kind.platform import KIND_SH, KubectlError, run_script
from kafkube.harness.waiting import wait_until

# The faults proper; ROLL and SCALE are the operations done between them.
DELETE_POD = "delete-pod"
KILL_BROKER = "kill-broker"
FREEZE_NODE = "freeze-node"
STOP_APISERVER = "stop-apiserver"
KILL_OPERATOR = "kill-operator"
PARTITION_NODES = "partition-nodes"
PARTITION_APISERVER = "partition-apiserver"
FAULTS = (DELETE_POD, KILL_BROKER, FREEZE_NODE, STOP_APISERVER, KILL_OPERATOR,
          PARTITION_NODES, PARTITION_APISERVER)
ROLL = "roll"
SCALE = "scale"
BETWEEN = (ROLL, SCALE)
# Those that need the nodes of a kind cluster of our own (docker, iptables, signals there).
ON_NODES = (KILL_BROKER, FREEZE_NODE, STOP_APISERVER, PARTITION_NODES, PARTITION_APISERVER)
# How long a lasting fault lasts, seconds (uniform): a frozen node or a partition longer
# than broker.session.timeout.ms (9 s), so the broker is fenced and must come back; shorter
# than the node monitor's grace period (40 s), so Kubernetes does not evict the pods too.
LASTING = {FREEZE_NODE: (15.0, 25.0), STOP_APISERVER: (20.0, 30.0),
           PARTITION_NODES: (15.0, 25.0), PARTITION_APISERVER: (20.0, 30.0)}
CHAIN = "KAFKUBE-CHAOS"
HOOKS = ("INPUT", "OUTPUT", "FORWARD")
API_PORT = 6443
WHOLE_TIMEOUT = 300.0  # a fault not healed within this is a wedge: the run stops there
BACK_TIMEOUT = 120.0  # a killed broker restarted, a deleted pod replaced, the API answering
ROLL_TIMEOUT = 900.0
SCALE_TIMEOUT = 900.0


@dataclass(frozen=True)
class Node:
    name: str
    ip: str
    pod_cidr: str
    control_plane: bool


class Faults:
    """The faults on one KafkaCluster's brokers (``brokers``); ``avoid`` is the node of the
    producer pod, which node faults spare when they can: a frozen or cut-off producer would
    count its own stall as the cluster's unavailability."""

    def __init__(self, brokers: Brokers, rng: random.Random, log: Callable[[str], None],
                 avoid: str | None = None) -> None:
        self.brokers = brokers
        self.cluster = brokers.cluster
        self.rng = rng
        self.log = log
        self.avoid = avoid
        self.nodes = self._nodes() if self.cluster.name else {}
        self.rolls = 0
        # Set by the run: whether every partition is being written again (the producer's
        # view; the brokers' view can be whole while a client still stalls).
        self.writable: Callable[[], bool] | None = None

    # -- what there is -----------------------------------------------------------------------

    def _nodes(self) -> dict[str, Node]:
        items = json.loads(self.cluster.kubectl("get", "nodes", "-o", "json"))["items"]
        return {n["metadata"]["name"]: Node(
            n["metadata"]["name"],
            next(a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"),
            n["spec"].get("podCIDR", ""),
            "node-role.kubernetes.io/control-plane" in n["metadata"].get("labels", {}))
            for n in items}

    def control_plane(self) -> Node:
        return next(n for n in self.nodes.values() if n.control_plane)

    def placement(self) -> dict[int, str]:
        """Broker id -> the node its pod runs on."""
        pods = json.loads(self.brokers.kubectl(
            "get", "pods", "-l", f"kafkube.io/cluster={self.brokers.name}", "-o",
            "json"))["items"]
        return {int(p["metadata"]["name"].rsplit("-", 1)[1]): p["spec"].get("nodeName", "")
                for p in pods if p["spec"].get("nodeName")}

    def broker_nodes(self) -> list[str]:
        """The nodes running brokers, the producer's last (sorted, so a seed repeats)."""
        found = sorted(set(self.placement().values()))
        return sorted(found, key=lambda n: n == self.avoid)

    def named(self, node: str) -> str:
        """A node with the brokers on it, for the record."""
        on = sorted(b for b, n in self.placement().items() if n == node)
        return f"{node} (broker {','.join(map(str, on))})" if on else node

    def pick_broker(self) -> int:
        return self.rng.randrange(self.brokers.size)

    def pick_node(self) -> str:
        """A broker's node other than the producer's where there is one."""
        found = self.broker_nodes()
        spared = [n for n in found if n != self.avoid] or found
        return self.rng.choice(spared)

    def incarnation(self, broker: int) -> tuple[str, int]:
        """The broker pod's uid and container restarts: either changes once a kill took."""
        pod = json.loads(self.brokers.kubectl("get", "pod", f"{self.brokers.name}-{broker}",
                                              "-o", "json"))
        return pod["metadata"]["uid"], sum(c.get("restartCount", 0) for c in
                                           pod["status"].get("containerStatuses", []))

    def engine(self, *argv: str, timeout: float = 60.0) -> str:
        """A command of the kind cluster's Docker engine (the nodes are its containers)."""
        return run_script([str(KIND_SH), "exec", str(self.cluster.name), "--", "docker",
                           *argv], timeout=timeout)

    # -- the faults: each returns what it hit, and is undone when it returns -------------------

    def inject(self, kind: str, number: int) -> str:
        """Does one fault (or a roll, a scale) and waits until it is undone; not until the
        cluster is whole again (``whole``)."""
        return getattr(self, kind.replace("-", "_"))(number)

    def delete_pod(self, _number: int) -> str:
        broker = self.pick_broker()
        was = self.incarnation(broker)
        self.brokers.kubectl("delete", "pod", f"{self.brokers.name}-{broker}",
                             "--grace-period=0", "--force")
        self._replaced(broker, was)
        return f"pod {self.brokers.name}-{broker}"

    def kill_broker(self, _number: int) -> str:
        broker = self.pick_broker()
        was = self.incarnation(broker)
        self.brokers.crash(broker)
        self._replaced(broker, was)
        return f"broker {broker}'s process"

    def _replaced(self, broker: int, was: tuple[str, int]) -> None:
        """Until the kubelet has seen the old process end, "whole" is the old broker."""
        def changed() -> bool:
            try:
                return self.incarnation(broker) != was
            except KubectlError:  # deleted, not yet created again
                return False
        wait_until(changed, BACK_TIMEOUT, f"broker {broker} replaced or restarted", 0.5)

    def freeze_node(self, _number: int) -> str:
        node = self.pick_node()
        seconds = self.rng.uniform(*LASTING[FREEZE_NODE])
        try:
            self.engine("pause", node)
            time.sleep(seconds)
        finally:
            self.engine("unpause", node)
        return f"{self.named(node)} for {seconds:.0f} s"

    def stop_apiserver(self, _number: int) -> str:
        node = self.control_plane().name
        seconds = self.rng.uniform(*LASTING[STOP_APISERVER])
        try:
            self.cluster.on_node(node, "pkill", "-STOP", "-x", "kube-apiserver")
            time.sleep(seconds)
        finally:
            self.cluster.on_node(node, "pkill", "-CONT", "-x", "kube-apiserver")
        self.api_answering()
        return f"kube-apiserver SIGSTOPped for {seconds:.0f} s"

    def kill_operator(self, _number: int) -> str:
        # The holder of record is a running pod: an operator that lost its Lease through
        # an earlier fault ends its process, and its pod may have been replaced since.
        holder = wait_until(lambda: (h := self.operator_holder()) in self.operator_pods()
                            and h, BACK_TIMEOUT, "the operator Lease held by a pod", 1.0)
        self.cluster.kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", holder,
                             "--grace-period=0", "--force")

        def taken() -> str | None:
            try:
                now = self.operator_holder()
            except KubectlError:
                return None
            return now if now and now != holder else None
        return f"{holder} (then {wait_until(taken, BACK_TIMEOUT, 'a new operator', 1.0)})"

    def operator_pods(self) -> list[str]:
        return self.cluster.kubectl(
            "-n", OPERATOR_NAMESPACE, "get", "pods", "-l",
            "app.kubernetes.io/name=kafkube-operator", "-o",
            "jsonpath={.items[*].metadata.name}").split()

    def operator_holder(self) -> str:
        return self.cluster.kubectl("-n", OPERATOR_NAMESPACE, "get", "lease",
                                    "kafkube-operator", "-o", "jsonpath={.spec.holderIdentity}")

    def partition_nodes(self, _number: int) -> str:
        """Two brokers' nodes cut from each other (node and pod addresses, both ways, all
        cut on the first); the producer's node is spared where there are two others."""
        found = self.broker_nodes()
        spared = [n for n in found if n != self.avoid]
        one, other = self.rng.sample(spared if len(spared) >= 2 else found, 2)
        peer = self.nodes[other]
        rules = [f"-s {peer.ip}", f"-d {peer.ip}"] + (
            [f"-s {peer.pod_cidr}", f"-d {peer.pod_cidr}"] if peer.pod_cidr else [])
        seconds = self.rng.uniform(*LASTING[PARTITION_NODES])
        self.cut_for(one, rules, seconds)
        return f"{self.named(one)} | {self.named(other)} for {seconds:.0f} s"

    def partition_apiserver(self, _number: int) -> str:
        """A broker's node cut from the API server (its kubelet and its pods: a pod's
        traffic to the kubernetes Service is already rewritten to the control plane's
        address and port when it is forwarded)."""
        node = self.pick_node()
        api = self.control_plane().ip
        seconds = self.rng.uniform(*LASTING[PARTITION_APISERVER])
        self.cut_for(node, [f"-p tcp -d {api} --dport {API_PORT}",
                            f"-p tcp -s {api} --sport {API_PORT}"], seconds)
        return f"{self.named(node)} | API server for {seconds:.0f} s"

    def cut_for(self, node: str, rules: list[str], seconds: float) -> None:
        try:
            script = [f"iptables -N {CHAIN} 2>/dev/null || iptables -F {CHAIN}",
                      *(f"iptables -A {CHAIN} {rule} -j DROP" for rule in rules),
                      *(f"iptables -I {hook} 1 -j {CHAIN}" for hook in HOOKS)]
            self.cluster.on_node(node, "sh", "-ec", "\n".join(script))
            time.sleep(seconds)
        finally:
            self.mend(node)

    def mend(self, node: str) -> None:
        """Our chain unhooked (at most three jumps from each hook), emptied and removed."""
        unhook = [f"for i in 1 2 3; do iptables -D {hook} -j {CHAIN} 2>/dev/null || break; "
                  "done" for hook in HOOKS]
        self.cluster.on_node(node, "sh", "-c", "\n".join(
            [*unhook, f"iptables -F {CHAIN} 2>/dev/null", f"iptables -X {CHAIN} 2>/dev/null",
             "exit 0"]))

    def roll(self, number: int) -> str:
        """A config edit of the KafkaCluster (a retention one millisecond longer each time):
        the operator restarts the brokers one at a time onto the new revision."""
        self.rolls += 1
        before = self.sts_revision()
        self.patch({"spec": {"config": {"log.retention.ms": 604_800_000 + self.rolls}}})
        revision = wait_until(lambda: (r := self.sts_revision()) != before and r, 120,
                              "the StatefulSet's new revision", 2.0)

        def rolled() -> bool:
            pods = json.loads(self.brokers.kubectl(
                "get", "pods", "-l", f"kafkube.io/cluster={self.brokers.name}", "-o",
                "json"))["items"]
            return len(pods) == self.brokers.size and all(
                p["metadata"]["labels"].get("controller-revision-hash") == revision
                for p in pods)
        wait_until(rolled, ROLL_TIMEOUT, "every broker restarted onto the new revision", 3.0)
        return f"log.retention.ms edit, revision {revision}"

    def scale(self, _number: int) -> str:
        """3 -> 4 -> 3: a broker added and given replicas, then drained and removed."""
        size = self.brokers.size
        self.patch({"spec": {"replicas": size + 1}})
        wait_until(lambda: (s := self.status()).get("readyReplicas") == size + 1
                   and "scaling" not in s, SCALE_TIMEOUT, f"{size + 1} brokers, spread", 3.0)
        self.brokers.size = size + 1
        self.whole()
        self.patch({"spec": {"replicas": size}})
        names = [f"pod/{self.brokers.name}-{b}" for b in range(size)]
        wait_until(lambda: self.brokers.kubectl(
            "get", "pods", "-l", f"kafkube.io/cluster={self.brokers.name}", "-o",
            "name").split() == names and "scaling" not in self.status(), SCALE_TIMEOUT,
            f"broker {size} drained and its pod gone", 3.0)
        self.brokers.size = size
        return f"{size} -> {size + 1} -> {size} brokers"

    def patch(self, body: dict) -> None:
        self.brokers.kubectl("patch", "kafkacluster", self.brokers.name, "--type=merge", "-p",
                             json.dumps(body))

    def status(self) -> dict:
        return json.loads(self.brokers.kubectl("get", "kafkacluster", self.brokers.name,
                                               "-o", "json")).get("status", {})

    def sts_revision(self) -> str:
        return self.brokers.kubectl("get", "statefulset", self.brokers.name, "-o",
                                    "jsonpath={.status.updateRevision}")

    # -- healing -------------------------------------------------------------------------------

    def api_answering(self, timeout: float = BACK_TIMEOUT) -> None:
        def answers() -> bool:
            try:
                return self.cluster.kubectl("get", "--raw", "/readyz", timeout=10) == "ok"
            except (KubectlError, subprocess.TimeoutExpired):  # still stopped, or starting
                return False
        wait_until(answers, timeout, "the API server answering", 1.0)

    def whole(self, timeout: float = WHOLE_TIMEOUT) -> None:
        """Every broker Ready and no partition under-replicated (Brokers.wait_whole), once
        the API server answers, and every partition written again (``writable``); a
        kubectl failing on the way (an API server still recovering, a pod being replaced)
        is tried again within the same bound."""
        deadline = time.monotonic() + timeout
        self.api_answering(timeout)
        for _ in range(20):
            try:
                self.brokers.wait_whole(max(1.0, deadline - time.monotonic()))
                if self.writable is not None:
                    wait_until(self.writable, max(1.0, deadline - time.monotonic()),
                               "every partition acknowledging writes again", 1.0)
                return
            except KubectlError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
        raise AssertionError("the cluster's state could not be read")

    def heal_all(self) -> None:
        """Everything any fault could have left, undone on every node once more (each step
        on its own: one failing does not keep the others from running)."""
        if not self.cluster.name:
            return
        steps: list[tuple[str, Callable[[], object]]] = [
            ("kube-apiserver continued", lambda: self.cluster.on_node(
                self.control_plane().name, "sh", "-c", "pkill -CONT -x kube-apiserver; :"))]
        for node in self.nodes:
            steps += [(f"{node} unpaused", lambda n=node: self.engine(
                "ps", "-q", "--filter", f"name=^{n}$", "--filter", "status=paused")
                and self.engine("unpause", n)),
                (f"{node} rules removed", lambda n=node: self.mend(n))]
        for what, step in steps:
            try:
                step()
            except Exception as e:
                self.log(f"healing: {what} failed: {e}")

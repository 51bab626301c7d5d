"""A real Kubernetes API server on loopback for the integration tier and the benchmarks of
the metadata image: Debian's etcd and a kube-apiserver built from the Go module proxy
(scripts/kubernetes.sh), with a CA, a serving certificate and a service-account key of the
run's own, and a kubeconfig for an admin.

No nodes: this tier tests what talks to the API server (the Kubernetes coordination backend).
The e2e tier runs kind. The server can be paused (SIGSTOP), killed and restarted on the same
port and data, as the tests of a broker riding out an API server outage need.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

from kafkube.harness.checkout import repo_file
from kafkube.harness.ports import free_port
from kafkube.harness.process_group import die_with_parent

ADMIN_TOKEN = "kafkube-admin-token"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(directory: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost signed by it, a service-account
    key pair."""
    d = directory
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=kafkube-test-ca", "-keyout", str(d / "ca.key"),
             "-out", str(d / "ca.crt"))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kube-apiserver",
             "-keyout", str(d / "apiserver.key"), "-out", str(d / "apiserver.csr"))
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", str(d / "apiserver.csr"), "-CA", str(d / "ca.crt"),
             "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2",
             "-extfile", str(d / "san.ext"), "-out", str(d / "apiserver.crt"))
    _openssl("genrsa", "-out", str(d / "sa.key"), "2048")
    _openssl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))


class LocalControlPlane:
    def __init__(self, directory: Path, apiserver: Path) -> None:
        self.dir = directory
        self.apiserver_bin = apiserver
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.port = free_port()
        self.etcd: subprocess.Popen | None = None
        self.apiserver: subprocess.Popen | None = None
        self.kubeconfig = directory / "kubeconfig"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> LocalControlPlane:
        self.dir.mkdir(parents=True, exist_ok=True)
        make_certificates(self.dir)
        (self.dir / "tokens.csv").write_text(f"{ADMIN_TOKEN},admin,admin,system:masters\n")
        self._write_kubeconfig()
        self.start_etcd()
        self.start_apiserver()
        return self

    def start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        with open(self.dir / "etcd.log", "ab") as out:
            self.etcd = subprocess.Popen(
                ["etcd", "--name", "default", "--data-dir", str(self.dir / "etcd"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"default={peer}"],
                stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)

    def start_apiserver(self, timeout: float = 90) -> None:
        d = self.dir
        args = [
            str(self.apiserver_bin),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={d / 'apiserver.crt'}",
            f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--token-auth-file={d / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
        ]
        with open(d / "apiserver.log", "ab") as out:
            # Gone with the test run even when it is killed (die_with_parent: PDEATHSIG).
            self.apiserver = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                              preexec_fn=die_with_parent)
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        request = urllib.request.Request(f"{self.url}/readyz",
                                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.apiserver is not None
            if self.apiserver.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(request, timeout=5, context=context) as answer:
                    if answer.status == 200:
                        return
            except OSError as e:
                last = e
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready in {timeout}s ({last}): {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        path = self.dir / "apiserver.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) \
            if path.exists() else ""

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: {self.url}
    certificate-authority: {self.dir / 'ca.crt'}
users:
- name: admin
  user:
    token: {ADMIN_TOKEN}
contexts:
- name: local
  context: {{cluster: local, user: admin, namespace: default}}
current-context: local
""")

    # -- outages -------------------------------------------------------------------------

    def pause(self) -> None:
        assert self.apiserver is not None
        self.apiserver.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.apiserver is not None
        self.apiserver.send_signal(signal.SIGCONT)

    def kill_apiserver(self) -> None:
        if self.apiserver is not None and self.apiserver.poll() is None:
            os.kill(self.apiserver.pid, signal.SIGCONT)
            self.apiserver.kill()
            self.apiserver.wait(10)

    def stop(self) -> None:
        self.kill_apiserver()
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.terminate()
            try:
                self.etcd.wait(10)
            except subprocess.TimeoutExpired:
                self.etcd.kill()


def build_apiserver() -> Path:
    """The kube-apiserver binary, built once and cached (scripts/kubernetes.sh)."""
    script = repo_file("scripts", "kubernetes.sh")
    out = subprocess.run(["bash", str(script), "kube-apiserver"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1]) / "kube-apiserver"

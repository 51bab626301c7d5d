"""socket.send.buffer.bytes and socket.receive.buffer.bytes on a real broker's sockets.

Read from the kernel's side with ``ss`` (iproute2, installed by scripts/setup.sh): the
buffer a socket has is twice what was set (Linux keeps room for its bookkeeping), and
autotuning is off once a size is set.
"""

from __future__ import annotations

import re
import socket
import subprocess

import pytest

from broker.config.broker_config import BrokerConfig
from kafkube.harness.process import BrokerProcess
from kafkube.harness.waiting import wait_until
from kafkube_contract.config_keys import ConfigError


def accepted_buffers(broker: BrokerProcess, client: socket.socket) -> tuple[int, int] | None:
    """(receive, send) buffer bytes of the broker's end of ``client``'s connection."""
    port = broker.bootstrap.rsplit(":", 1)[1]
    peer = client.getsockname()[1]
    out = subprocess.run(
        ["ss", "-tmnH", "state", "established", f"( sport = :{port} and dport = :{peer} )"],
        capture_output=True, text=True, check=True).stdout
    found = re.search(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)", out)
    return (int(found[1]), int(found[2])) if found else None


# ApiVersions v0, correlation id 1, no client id.
API_VERSIONS_V0 = b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff"


def connect(broker: BrokerProcess) -> socket.socket:
    """A connection the broker has accepted and answered on: ``ss`` sees a connection as
    soon as the kernel completes its handshake, before the broker's accept() has set its
    send buffer (the receive buffer comes from the listening socket)."""
    host, port = broker.bootstrap.rsplit(":", 1)
    client = socket.create_connection((host, int(port)), timeout=10)
    client.sendall(API_VERSIONS_V0)
    size = int.from_bytes(client.recv(4, socket.MSG_WAITALL), "big")
    assert len(client.recv(size, socket.MSG_WAITALL)) == size
    return client


def test_kafkas_defaults_are_set_on_every_connection(broker_factory):
    """Kafka's 100 KiB each way. The send side matters for fetch on loopback: with an
    autotuned multi-MiB buffer the consumer's thread ends up doing the sending."""
    broker = broker_factory()
    with connect(broker) as client:
        buffers = wait_until(lambda: accepted_buffers(broker, client), 10,
                             "the broker's end of the connection in ss")
    assert buffers == (2 * 102400, 2 * 102400)


def test_set_sizes_are_used_and_minus_one_leaves_the_kernel_default(broker_factory):
    broker = broker_factory(socket_send_buffer_bytes=262144,
                            socket_receive_buffer_bytes=-1)
    with connect(broker) as client:
        receive, send = wait_until(lambda: accepted_buffers(broker, client), 10,
                                   "the broker's end of the connection in ss")
    assert send == 2 * 262144
    assert receive != 2 * 102400  # the kernel's own (autotuned) size, not Kafka's default


@pytest.mark.parametrize("key", ["socket.send.buffer.bytes", "socket.receive.buffer.bytes"])
def test_sizes_below_minus_one_are_refused(key):
    with pytest.raises(ConfigError, match=f"{key}: -2 is below the minimum -1"):
        BrokerConfig.from_dict({key: "-2"})

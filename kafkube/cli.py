"""The `kafkube` command line: `kafkube broker`, `kafkube dev`, `kafkube operator`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from broker.config.broker_config import BrokerConfig
from kafkube_contract.config_keys import ConfigError


def _broker(args: argparse.Namespace) -> int:
    from broker.app import run

    try:
        overrides = list(args.override)
        if args.pod_identity:
            overrides = _pod_identity(args.config, overrides) + overrides
        config = BrokerConfig.from_sources(args.config, overrides)
    except ConfigError as e:
        print(f"kafkube broker: invalid configuration: {e}", file=sys.stderr)
        return 2
    from broker.cluster.features import ClusterTooNew
    from broker.storage.log_dir_lock import LogDirLocked
    from kafkube_contract.image import ImageFormatError

    try:
        run(config)
    except ConfigError as e:
        print(f"kafkube broker: invalid configuration: {e}", file=sys.stderr)
        return 2
    except (ClusterTooNew, ImageFormatError) as e:
        # Kubernetes shows the last lines as the pod's termination message
        # (FallbackToLogsOnError): what kubectl describe says, and what the operator reads.
        print(f"kafkube broker: cannot join the cluster: {e}", file=sys.stderr)
        return 3
    except LogDirLocked as e:
        print(f"kafkube broker: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"kafkube broker: {e}", file=sys.stderr)
        return 1
    return 0


def _pod_identity(file: Path | None, overrides: list[str]) -> list[str]:
    """node.id, advertised.listeners and broker.rack from the StatefulSet pod's environment,
    for whichever of them the configuration leaves unset (broker/cluster/pod_identity.py)."""
    from broker.cluster.pod_identity import RACK_LABEL_ENV, ZONE_LABEL, pod_overrides, zone_from_api

    configured = BrokerConfig.from_sources(file, overrides)
    label = os.environ.get(RACK_LABEL_ENV) or ZONE_LABEL
    lookup = zone_from_api(configured["kafkube.kubernetes.kubeconfig"], label)

    def zone(node: str) -> str | None:
        try:
            return lookup(node)
        except Exception as e:
            raise ConfigError(f"--pod-identity: cannot read the label {label} of node {node} "
                              f"({e}); set broker.rack or allow get on nodes") from None

    derived = pod_overrides(os.environ, configured.originals, zone)
    return [f"{key}={value}" for key, value in derived.items()]


def _dev(args: argparse.Namespace) -> int:
    from kafkube import dev

    if args.brokers < 1:
        print("kafkube dev: --brokers must be at least 1", file=sys.stderr)
        return 2
    return dev.run(args.data_dir, args.brokers, args.port, args.metrics_port, args.override,
                   args.quiet)


def _operator(args: argparse.Namespace) -> int:
    try:
        from kafkube_operator.main import OperatorOptions, run
    except ModuleNotFoundError as e:  # a broker installed without the operator's extra
        print(f"kafkube operator: {e.name} is not installed; the operator needs "
              f"pip install 'kafkube[operator]'", file=sys.stderr)
        return 2

    if args.namespace and args.all_namespaces:
        print("kafkube operator: --namespace and --all-namespaces exclude each other",
              file=sys.stderr)
        return 2
    return run(OperatorOptions(
        kubeconfig=args.kubeconfig, namespaces=tuple(args.namespace),
        lease_namespace=args.lease_namespace, metrics_port=args.metrics_port,
        lease_duration_s=args.lease_duration))


def _features(args: argparse.Namespace) -> int:
    """What the operator asks a new image before rolling to it: the levels of each feature
    its brokers can run at, as one JSON line (also the pod's termination message)."""
    import json

    from broker.cluster.features import SUPPORTED

    line = json.dumps({"supported_features": {n: list(r) for n, r in sorted(SUPPORTED.items())}})
    print(line)
    if args.termination_log is not None:
        try:
            args.termination_log.write_text(line)
        except OSError as e:  # outside a pod the file may not be writable: stdout still has it
            print(f"kafkube features: {args.termination_log}: {e}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkube", description=__doc__)
    parser.add_argument("--log-level", default="INFO", help="Python logging level (INFO)")
    sub = parser.add_subparsers(dest="command", required=True)
    broker = sub.add_parser("broker", help="run one Kafka-protocol broker")
    broker.add_argument("--config", type=Path, help="server.properties file")
    broker.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set a config key, overriding the file (repeatable)",
    )
    broker.add_argument(
        "--pod-identity", action="store_true",
        help="as a StatefulSet pod: node.id from the pod ordinal, advertised.listeners from "
             "its stable DNS name, broker.rack from its node's zone, unless set")
    broker.set_defaults(func=_broker)
    dev = sub.add_parser("dev", help="run a local multi-broker cluster as processes")
    dev.add_argument("--brokers", type=int, default=3, help="number of brokers (3)")
    dev.add_argument("--data-dir", type=Path, default=Path(".kafkube-dev"),
                     help="log dirs and the coordination file (.kafkube-dev)")
    dev.add_argument("--port", type=int, default=9092,
                     help="port of broker 0; broker N listens on port+N (9092)")
    dev.add_argument("--metrics-port", type=int, default=-1,
                     help="metrics port of broker 0, +N for broker N (-1: off)")
    dev.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                     help="a broker config key for every broker (repeatable)")
    dev.add_argument("--quiet", action="store_true", help="do not relay the brokers' logs")
    dev.set_defaults(func=_dev)
    operator = sub.add_parser(
        "operator",
        help="run the Kubernetes operator for KafkaCluster, Topic and KafkaUser resources")
    operator.add_argument("--kubeconfig", help="outside a cluster: its kubeconfig "
                          "(default: the pod's service account, else ~/.kube/config)")
    operator.add_argument("--namespace", action="append", default=[],
                          help="watch only this namespace (repeatable)")
    operator.add_argument("--all-namespaces", action="store_true",
                          help="watch every namespace (the default)")
    operator.add_argument("--lease-namespace",
                          help="namespace of the operator Lease (default: the pod's own)")
    operator.add_argument("--lease-duration", type=int, default=15,
                          help="seconds a standby waits for a silent active operator (15)")
    operator.add_argument("--metrics-port", type=int, default=8080,
                          help="Prometheus /metrics port, -1 for none (8080)")
    operator.set_defaults(func=_operator)
    features = sub.add_parser(
        "features", help="print the feature levels this kafkube supports, as JSON")
    features.add_argument("--termination-log", type=Path,
                          help="also write them to this file (a pod's /dev/termination-log)")
    features.set_defaults(func=_features)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

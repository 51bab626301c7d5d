"""A change of spec.listeners on a running cluster, in steps a roll can take.

Brokers replicate on their ``inter.broker.listener.name`` and dial each other on it (each
looks its peers up by its own). A roll is one broker at a time, so for a while the brokers
run two configurations side by side, and they must still reach each other: a broker moved
to replicating on ``REPLICATION`` (TLS, 9091) cannot fetch from one not yet restarted that
has no such listener. Kafka's documentation changes the inter-broker listener in three
rolls for this reason, and so does the operator:

1. **add**: the wanted listeners beside the running ones, replication still on the old one
   (a wanted listener on the port of the old inter-broker listener waits for step 3);
2. **switch**: replicate on the wanted inter-broker listener, which every broker now has;
3. **finish**: the wanted layout, the old listeners gone.

A change that keeps the inter-broker listener is one roll. The authorizer is only on where
both layouts have it until the last step: brokers replicating as ``User:ANONYMOUS`` on a
plaintext listener would be refused by one that enforces ACLs. Each step starts only once
every broker runs the one before it (reconcile/cluster.py decides that).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kafkube_operator.model.listeners import ListenerLayout


@dataclass(frozen=True)
class ListenerStep:
    """The layout to configure now, and what is under way, for the status; ``final`` when
    it is the wanted one."""

    layout: ListenerLayout
    final: bool
    description: str = ""
    # What the step under way waits for before the next one (None: a step starts now).
    waiting_for: str | None = None


def next_step(running: ListenerLayout | None, wanted: ListenerLayout) -> ListenerStep:
    """The layout to roll onto from ``running`` (the brokers' ConfigMap, every broker on
    it; None for a cluster not yet made) towards ``wanted``."""
    if running is None or running == wanted:
        return ListenerStep(wanted, True)
    if running.inter_broker == wanted.inter_broker:
        return ListenerStep(wanted, True, (
            f"listener change: rolling onto {', '.join(sorted(wanted.names))} (the last step "
            "of a change of the inter-broker listener, or a change that keeps it)"))
    target = wanted.listener(wanted.inter_broker)
    if target is not None and running.listener(wanted.inter_broker) != target:
        return ListenerStep(_with_added(running, wanted), False, (
            "listener change, step 1 of 3: adding "
            f"{', '.join(sorted(wanted.names - running.names))} beside "
            f"{running.inter_broker}, which the brokers still replicate on"))
    if target is None:  # cannot happen with the operator's layouts: nothing to phase
        return ListenerStep(wanted, True)
    return ListenerStep(replace(running, inter_broker=wanted.inter_broker), False, (
        f"listener change, step 2 of 3: replicating on {wanted.inter_broker} instead of "
        f"{running.inter_broker}"))


def _with_added(running: ListenerLayout, wanted: ListenerLayout) -> ListenerLayout:
    """Step 1: every wanted listener that can sit beside the running inter-broker one, and
    the running listeners whose name and port no added one takes."""
    keep = running.listener(running.inter_broker)
    added = [li for li in wanted.listeners
             if keep is None or (li.port != keep.port and li.config_name != keep.config_name)]
    taken_ports = {li.port for li in added}
    taken_names = {li.config_name for li in added}
    kept = [li for li in running.listeners
            if li == keep or (li.port not in taken_ports and li.config_name not in taken_names)]
    return ListenerLayout((*kept, *added), running.inter_broker,
                          running.authorization and wanted.authorization)


"""What the last apply pass of a KafkaCluster decided (reconcile/cluster_apply.py), kept in
the operator's memory of the cluster (reconcile/views.py) so the passes that only observe
report the same warnings, scale and listener steps until the next apply."""

from __future__ import annotations

from dataclasses import dataclass

from kafkube_operator.model.listener_change import ListenerStep
from kafkube_operator.model.scale import ScaleDecision
from kafkube_operator.model.sizing import PoolSizing
from kafkube_operator.model.status import SpecWarning
from kafkube_operator.model.upgrade import ImageDecision


@dataclass(frozen=True)
class ApplyOutcome:
    """What an apply pass decided, for the status of the passes that only observe until the
    next apply: the generation it applied, its warnings, the scale decision, the listener
    step, the default min.insync.replicas the brokers were given."""

    generation: int
    warnings: tuple[SpecWarning, ...]
    scaling: ScaleDecision
    step: ListenerStep
    default_min_isr: int
    config_hash: str | None
    changed: bool
    at: float  # time.monotonic() of the pass
    upgrade: ImageDecision | None = None  # spec.image rolled out, probed or held back
    sizing: tuple[PoolSizing, ...] = ()  # spec.autoSizing's resources per pool

    def under_way(self) -> bool:
        """A change that takes several passes, each to be applied: a scale with its moves,
        a refused scale-down to look at again, a listener change between steps, a new image
        probed or held back (its probe looked at; a level lowered since lets it roll)."""
        return (self.scaling.phase is not None or self.scaling.waiting is not None
                or self.scaling.refused is not None or not self.step.final
                or (self.upgrade is not None and self.upgrade.phase is not None))

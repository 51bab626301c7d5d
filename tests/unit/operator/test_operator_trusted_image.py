"""Which image a pass may act on (reconcile/views.py, ``trusted_image``), from what the
cluster's view (cluster_view.py) reads: one read of the image and its identity, the brokers'
history asked only when it is missing, and an image of a newer format not acted on."""

from __future__ import annotations

from dataclasses import dataclass

from kafkube_contract.image import ImageFormatError, ImageView, StoredIdentity
from kafkube_operator.reconcile.views import ClusterMemory, trusted_image


@dataclass
class FakeView:
    stored: tuple[StoredIdentity, ImageView] | Exception | None
    history: bool = False
    where: str = "ConfigMap kafka/prod-metadata"
    history_asked: int = 0

    def stored_image(self) -> tuple[StoredIdentity, ImageView] | None:
        if isinstance(self.stored, Exception):
            raise self.stored
        return self.stored

    def has_history(self) -> bool:
        self.history_asked += 1
        return self.history


def test_the_image_read_is_the_one_judged_and_history_is_not_asked() -> None:
    image = ImageView(version=7)
    view = FakeView((StoredIdentity("id-1", 7), image))
    trusted = trusted_image(view, {"clusterId": "id-1", "metadataVersion": 5},  # type: ignore[arg-type]
                            ClusterMemory())
    assert (trusted.image, trusted.cluster_id, trusted.problem, trusted.version) == \
        (image, "id-1", None, 7)
    assert view.history_asked == 0


def test_no_image_is_a_problem_only_where_brokers_ran() -> None:
    fresh = trusted_image(FakeView(None), None, ClusterMemory())  # type: ignore[arg-type]
    assert fresh.problem is None and fresh.image == ImageView()
    lost = trusted_image(FakeView(None, history=True), None, ClusterMemory())  # type: ignore[arg-type]
    assert lost.problem is not None and lost.problem.reason == "MetadataMissing"


def test_an_image_of_a_newer_format_is_not_acted_on_and_says_why() -> None:
    view = FakeView(ImageFormatError("the cluster image is in format 2, newer than format 1"))
    trusted = trusted_image(view, {"clusterId": "id-1", "metadataVersion": 5},  # type: ignore[arg-type]
                            ClusterMemory())
    assert trusted.problem is not None and trusted.problem.reason == "MetadataFormatUnknown"
    assert trusted.problem.message.startswith("ConfigMap kafka/prod-metadata: the cluster "
                                              "image is in format 2")
    assert trusted.status_fields() == {"clusterId": "id-1", "metadataVersion": 5}

"""KafkaUser quotas (spec.quotas): the model's plan (model/user.py: Strimzi's fields as
Kafka's quota keys on the user's principal name, keys the spec no longer has removed) as a
golden file and rules, then the reconcile step against the fake admin client of
test_operator_user_reconcile.py: set, kept, removed, refused into the status, deleted with
the user."""

from __future__ import annotations

from kafkube_operator.model.user import QuotaPlan, UserSpec, quota_plans
from kafkube_operator.reconcile.user import delete_user
from tests.unit.operator.test_operator_user_model import golden, kafka_user
from tests.unit.operator.test_operator_user_reconcile import (
    Events,
    FakeAdmin,
    FakeAdmins,
    FakeViews,
    cluster_with_pki,
    conditions,
    reconcile,
)

ALL = {"producerByteRate": 204800, "consumerByteRate": 409600, "requestPercentage": 55,
       "controllerMutationRate": 2.5}


def with_quotas(quotas: dict | None, authentication: str = "scram-sha-512") -> dict:
    user = kafka_user(authentication=authentication)
    if quotas is not None:
        user["spec"]["quotas"] = quotas
    return user


def test_the_quota_plan_of_a_new_user_matches_the_golden_file() -> None:
    plans = quota_plans(UserSpec.of(with_quotas(ALL)), {})
    golden("scram-user-quotas", [{"user": p.user, "set": [list(kv) for kv in p.set],
                                  "remove": list(p.remove)} for p in plans])


def test_only_changes_are_planned_and_dropped_keys_removed() -> None:
    user = UserSpec.of(with_quotas({"producerByteRate": 1024}))
    assert quota_plans(user, {"alice": {"producer_byte_rate": 1024.0}}) == []
    assert quota_plans(user, {"alice": {"producer_byte_rate": 2048.0,
                                        "request_percentage": 10.0}}) == [
        QuotaPlan("alice", (("producer_byte_rate", 1024.0),), ("request_percentage",))]
    assert quota_plans(UserSpec.of(with_quotas(None)), {"alice": {"consumer_byte_rate": 1.0}}) \
        == [QuotaPlan("alice", (), ("consumer_byte_rate",))]


def test_a_tls_users_quotas_name_its_certificate_and_leave_its_scram_name() -> None:
    user = UserSpec.of(with_quotas({"consumerByteRate": 100}, authentication="tls"))
    assert user.quota_names == ("CN=alice", "alice")
    assert quota_plans(user, {"alice": {"consumer_byte_rate": 100.0}}) == [
        QuotaPlan("CN=alice", (("consumer_byte_rate", 100.0),), ()),
        QuotaPlan("alice", (), ("consumer_byte_rate",))]


def test_reconcile_sets_keeps_and_removes_quotas() -> None:
    kube, admin, events = cluster_with_pki(), FakeAdmin(), Events()
    status = reconcile(kube, admin, with_quotas(ALL), events)
    assert conditions(status)["Ready"]["status"] == "True", status
    assert admin.quotas == {"alice": {"producer_byte_rate": 204800.0,
                                      "consumer_byte_rate": 409600.0,
                                      "request_percentage": 55.0,
                                      "controller_mutation_rate": 2.5}}
    assert "QuotasChanged" in events.infos
    again = Events()
    reconcile(kube, admin, with_quotas(ALL), again)
    assert "QuotasChanged" not in again.infos
    reconcile(kube, admin, with_quotas({"producerByteRate": 1000}))
    assert admin.quotas == {"alice": {"producer_byte_rate": 1000.0}}
    reconcile(kube, admin, with_quotas(None))
    assert admin.quotas == {}


def test_a_refused_quota_makes_the_user_not_ready() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    admin.refuse_quotas = "Quota producer_byte_rate must be greater than 0"
    status = reconcile(kube, admin, with_quotas({"producerByteRate": 0}))
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "KafkaRefused")
    assert "must be greater than 0" in ready["message"]


def test_deleting_a_user_removes_its_quotas() -> None:
    kube, admin = cluster_with_pki(), FakeAdmin()
    reconcile(kube, admin, with_quotas(ALL))
    admin.quotas["bob"] = {"producer_byte_rate": 5.0}
    assert delete_user(kube, FakeViews(), FakeAdmins(admin), with_quotas(ALL),  # type: ignore
                       Events())
    assert admin.quotas == {"bob": {"producer_byte_rate": 5.0}}

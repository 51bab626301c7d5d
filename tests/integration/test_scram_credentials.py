"""SCRAM credential admin (KIP-554) against real brokers: DescribeUserScramCredentials and
AlterUserScramCredentials on the wire with Kafka's error codes and messages, the keys stored
being the ones a SCRAM server needs (checked with scramp, the library that runs the
exchange), one image update per request, every broker seeing the credentials, a restarted
cluster keeping them, and Apache Kafka's own ConfigCommand adding, listing and deleting one.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import scramp
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.errors import ErrorCode

from broker.cluster.image import ClusterImage
from broker.cluster.sqlite import SqliteBackend
from kafkube.harness.metadata import Cluster
from kafkube.harness.waiting import wait_until
from kafkube.harness.wire import WireClient
from tests.support.kafka_tools import CONFIG_COMMAND

SHA256, SHA512 = 1, 2  # Kafka's ScramMechanism type ids
HASHES = {SHA256: "sha256", SHA512: "sha512"}
NAMES = {SHA256: "SCRAM-SHA-256", SHA512: "SCRAM-SHA-512"}
SALT = b"0123456789abcdef"  # 16 bytes: scramp needs 12 or more

NOT_FOUND = ErrorCode.resource_not_found
DUPLICATE = ErrorCode.duplicate_resource
UNACCEPTABLE = ErrorCode.unacceptable_credential
UNSUPPORTED = ErrorCode.unsupported_sasl_mechanism
NONE = ErrorCode.none


def upsertion(user: str, mechanism: int, password: str, iterations: int = 4096,
              salt: bytes = SALT, salted: bytes | None = None) -> ScramCredentialUpsertion:
    """What Kafka's AdminClient sends: Hi(password, salt, iterations) (RFC 5802), computed
    here with hashlib, independently of the broker's code."""
    if salted is None:
        salted = hashlib.pbkdf2_hmac(HASHES.get(mechanism, "sha256"), password.encode(),
                                     salt, max(iterations, 1))
    return ScramCredentialUpsertion(name=user, mechanism=mechanism, iterations=iterations,
                                    salt=salt, salted_password=salted)


def deletion(user: str, mechanism: int) -> ScramCredentialDeletion:
    return ScramCredentialDeletion(name=user, mechanism=mechanism)


def alter(client: WireClient, deletions: tuple = (), upsertions: tuple = ()
          ) -> list[tuple[str, ErrorCode, str | None]]:
    response = client.request(AlterUserScramCredentialsRequest(deletions=deletions,
                                                               upsertions=upsertions))
    return [(r.user, r.error_code, r.error_message) for r in response.results]


def describe(client: WireClient, users: list[str] | None = None) -> dict[str, Any]:
    """user -> sorted (mechanism, iterations) pairs, or (error code, message)."""
    names = None if users is None else tuple(UserName(name=u) for u in users)
    response = client.request(DescribeUserScramCredentialsRequest(users=names))
    assert (response.error_code, response.error_message) == (NONE, None)
    described: dict[str, Any] = {}
    for r in response.results:
        assert r.user not in described, f"{r.user} described twice"
        if r.error_code == NONE:
            assert r.error_message is None
            described[r.user] = sorted((c.mechanism, c.iterations) for c in r.credential_infos)
        else:
            assert r.credential_infos == ()
            described[r.user] = (r.error_code, r.error_message)
    return described


def stored(cluster: Cluster) -> ClusterImage:
    """The cluster metadata as the coordination store holds it."""
    backend = SqliteBackend(cluster.coordination_path)
    try:
        return backend.read_image()
    finally:
        backend.close()


def scramp_login(credential: Any, mechanism: int, password: str) -> bool:
    """A whole SCRAM exchange, scramp client against scramp server, the server given the
    stored credential: True when the password is accepted."""
    name = NAMES[mechanism]
    server = scramp.ScramMechanism(name).make_server(
        lambda _user: (credential.salt, credential.stored_key, credential.server_key,
                       credential.iterations))
    client = scramp.ScramClient([name], "alice", password)
    try:
        server.set_client_first(client.get_client_first())
        client.set_server_first(server.get_server_first())
        server.set_client_final(client.get_client_final())
        client.set_server_final(server.get_server_final())
    except scramp.ScramException:
        return False
    return True


def test_credentials_are_stored_described_replaced_and_deleted(cluster_factory):
    cluster = cluster_factory(1)
    with WireClient.connect(cluster.bootstrap) as client:
        assert describe(client) == {}
        before = stored(cluster).version
        assert sorted(alter(client, upsertions=(
            upsertion("alice", SHA256, "alice-256", 4096),
            upsertion("bob", SHA512, "bob-512", 8192, salt=b"salt-of-bob-12"),
        ))) == [("alice", NONE, None), ("bob", NONE, None)]
        image = stored(cluster)
        assert image.version == before + 1, "two users' credentials in one image update"
        assert alter(client, upsertions=(upsertion("alice", SHA512, "alice-512", 16384),)) == [
            ("alice", NONE, None)]

        assert describe(client) == {"alice": [(SHA256, 4096), (SHA512, 16384)],
                                    "bob": [(SHA512, 8192)]}
        assert describe(client, []) == describe(client), "an empty list means every user"
        assert describe(client, ["bob"]) == {"bob": [(SHA512, 8192)]}

        # The keys are RFC 5802's, exactly as scramp derives them from the password.
        image = stored(cluster)
        for user, mechanism, password, iterations, salt in (
                ("alice", SHA256, "alice-256", 4096, SALT),
                ("alice", SHA512, "alice-512", 16384, SALT),
                ("bob", SHA512, "bob-512", 8192, b"salt-of-bob-12")):
            credential = image.scram_credentials[user][NAMES[mechanism]]
            assert (credential.salt, credential.stored_key, credential.server_key,
                    credential.iterations) == scramp.ScramMechanism(
                        NAMES[mechanism]).make_auth_info(password, iterations, salt)
        alice_256 = image.scram_credentials["alice"]["SCRAM-SHA-256"]
        assert scramp_login(alice_256, SHA256, "alice-256")
        assert not scramp_login(alice_256, SHA256, "alice-512")

        # An upsertion replaces the user's credential for that mechanism only.
        assert alter(client, upsertions=(upsertion("alice", SHA256, "new", 5000),)) == [
            ("alice", NONE, None)]
        assert describe(client, ["alice"]) == {"alice": [(SHA256, 5000), (SHA512, 16384)]}
        assert scramp_login(stored(cluster).scram_credentials["alice"]["SCRAM-SHA-256"],
                            SHA256, "new")

        assert alter(client, deletions=(deletion("alice", SHA256),)) == [("alice", NONE, None)]
        assert describe(client, ["alice"]) == {"alice": [(SHA512, 16384)]}
        assert sorted(alter(client, deletions=(deletion("alice", SHA512),
                                               deletion("bob", SHA512)))) == [
            ("alice", NONE, None), ("bob", NONE, None)]
        assert describe(client) == {}
        assert stored(cluster).scram_credentials == {}
        assert describe(client, ["alice"]) == {"alice": (
            NOT_FOUND, "Attempt to describe a user credential that does not exist: alice")}


def test_describe_refuses_unknown_and_repeated_users(cluster_factory):
    cluster = cluster_factory(1)
    with WireClient.connect(cluster.bootstrap) as client:
        assert alter(client, upsertions=(upsertion("carol", SHA256, "pw"),)) == [
            ("carol", NONE, None)]
        response = client.request(DescribeUserScramCredentialsRequest(users=tuple(
            UserName(name=n) for n in ("ghost", "carol", "twice", "twice", "carol", ""))))
        assert [(r.user, r.error_code, r.error_message) for r in response.results] == [
            ("ghost", NOT_FOUND,
             "Attempt to describe a user credential that does not exist: ghost"),
            ("carol", DUPLICATE, "Cannot describe SCRAM credentials for the same user twice "
                                 "in a single request: carol"),
            ("twice", DUPLICATE, "Cannot describe SCRAM credentials for the same user twice "
                                 "in a single request: twice"),
            ("", NOT_FOUND, "Attempt to describe a user credential that does not exist: "),
        ]
        assert describe(client, ["carol"]) == {"carol": [(SHA256, 4096)]}


def test_alter_refuses_with_kafkas_codes_and_keeps_the_rest(cluster_factory):
    cluster = cluster_factory(1)
    with WireClient.connect(cluster.bootstrap) as client:
        assert sorted(alter(client, upsertions=(
            upsertion("has-256", SHA256, "pw"), upsertion("has-both", SHA256, "pw"),
            upsertion("del-upsert", SHA256, "pw")))) == [
            ("del-upsert", NONE, None), ("has-256", NONE, None), ("has-both", NONE, None)]
        assert alter(client, upsertions=(upsertion("has-both", SHA512, "pw"),)) == [
            ("has-both", NONE, None)]
        before = stored(cluster)

        results = alter(client, deletions=(
            deletion("", SHA256),                     # empty name
            deletion("bad-mech-del", 9),
            deletion("nobody", SHA256),               # no such user
            deletion("has-256", SHA512),              # the user, not that mechanism
            deletion("has-both", SHA256),             # twice for one user, both exist:
            deletion("has-both", SHA512),             # neither is deleted
            deletion("del-upsert", SHA256),           # a deletion and an upsertion
            deletion("refused-first", 0),             # refused; its later entry is ignored
        ), upsertions=(
            upsertion("del-upsert", SHA512, "pw"),
            upsertion("refused-first", SHA256, "pw"),
            upsertion("unknown-mech", 0, "pw"),
            upsertion("mech-3", 3, "pw"),
            upsertion("too-few", SHA256, "pw", 4095),
            upsertion("negative", SHA256, "pw", -1),
            upsertion("too-many", SHA512, "pw", 16385),
            upsertion("twice", SHA256, "pw"),
            upsertion("twice", SHA512, "pw"),
            upsertion("short-salt", SHA256, "pw", salt=b"12345678901"),
            upsertion("no-salt", SHA256, "pw", salt=b""),
            upsertion("no-salted", SHA256, "pw", salted=b""),
            upsertion("min", SHA256, "pw", 4096, salt=b"123456789012"),
            upsertion("max", SHA512, "pw", 16384),
        ))
        assert len(results) == len({user for user, _, _ in results}), results
        short_salt = ("Salt must be at least 12 bytes: this broker cannot authenticate with "
                      "a shorter one")
        assert {user: (code, message) for user, code, message in results} == {
            "": (UNACCEPTABLE, "Username must not be empty"),
            "bad-mech-del": (UNSUPPORTED, "Unknown SCRAM mechanism"),
            "nobody": (NOT_FOUND, "Attempt to delete a user credential that does not exist"),
            "has-256": (NOT_FOUND, "Attempt to delete a user credential that does not exist"),
            "has-both": (DUPLICATE,
                         "A user credential cannot be altered twice in the same request"),
            "del-upsert": (DUPLICATE,
                           "A user credential cannot be altered twice in the same request"),
            "refused-first": (UNSUPPORTED, "Unknown SCRAM mechanism"),
            "unknown-mech": (UNSUPPORTED, "Unknown SCRAM mechanism"),
            "mech-3": (UNSUPPORTED, "Unknown SCRAM mechanism"),
            "too-few": (UNACCEPTABLE, "Too few iterations"),
            "negative": (UNACCEPTABLE, "Too few iterations"),
            "too-many": (UNACCEPTABLE, "Too many iterations"),
            "twice": (DUPLICATE, "A user credential cannot be altered twice in the same request"),
            "short-salt": (UNACCEPTABLE, short_salt),
            "no-salt": (UNACCEPTABLE, short_salt),
            "no-salted": (UNACCEPTABLE, "Salted password must not be empty"),
            "min": (NONE, None),
            "max": (NONE, None),
        }
        after = stored(cluster)
        assert after.version == before.version + 1, "the accepted ones in one image update"
        assert after.scram_credentials == {
            **before.scram_credentials,
            "min": {"SCRAM-SHA-256": after.scram_credentials["min"]["SCRAM-SHA-256"]},
            "max": {"SCRAM-SHA-512": after.scram_credentials["max"]["SCRAM-SHA-512"]},
        }, "refused users are left exactly as they were"
        assert describe(client) == {
            "has-256": [(SHA256, 4096)], "has-both": [(SHA256, 4096), (SHA512, 4096)],
            "del-upsert": [(SHA256, 4096)], "min": [(SHA256, 4096)], "max": [(SHA512, 16384)]}

        # A request with nothing acceptable writes nothing.
        assert alter(client, deletions=(deletion("nobody", SHA512),)) == [
            ("nobody", NOT_FOUND, "Attempt to delete a user credential that does not exist")]
        assert alter(client) == []
        assert stored(cluster).version == after.version


def test_every_broker_sees_credentials_and_a_restarted_cluster_keeps_them(
        cluster_factory):
    cluster = cluster_factory(3)
    clients = [WireClient.connect(b.bootstrap) for b in cluster.brokers]
    try:
        assert alter(clients[0], upsertions=(upsertion("dave", SHA512, "pw", 8192),)) == [
            ("dave", NONE, None)]
        for i in (1, 2):
            wait_until(lambda c=clients[i]: describe(c, ["dave"]) == {"dave": [(SHA512, 8192)]},
                       10, f"broker {i} to describe dave's credential")
        assert alter(clients[2], deletions=(deletion("dave", SHA512),),
                     upsertions=(upsertion("erin", SHA256, "pw"),)) == [
            ("dave", NONE, None), ("erin", NONE, None)]
        wait_until(lambda: describe(clients[0]) == {"erin": [(SHA256, 4096)]}, 10,
                   "broker 0 to see dave deleted and erin added")
    finally:
        for client in clients:
            client.close()
    credential = stored(cluster).scram_credentials["erin"]["SCRAM-SHA-256"]

    assert set(cluster.stop().values()) == {0}
    cluster.start()
    for broker in cluster.brokers:
        with WireClient.connect(broker.bootstrap) as client:
            assert describe(client) == {"erin": [(SHA256, 4096)]}
    assert stored(cluster).scram_credentials == {"erin": {"SCRAM-SHA-256": credential}}


def test_kafka_config_command_adds_lists_and_deletes_a_credential(
        kafka_tools, cluster_factory):
    cluster = cluster_factory(1)
    users = ("--entity-type", "users")
    alice = (*users, "--entity-name", "alice")

    def configs(*args: str) -> str:
        return kafka_tools.run(CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap,
                               *args).stdout

    out = configs("--alter", "--add-config",
                  "SCRAM-SHA-512=[iterations=8192,password=alice-secret]", *alice)
    assert "Completed updating config for user alice." in out, out
    credential = stored(cluster).scram_credentials["alice"]["SCRAM-SHA-512"]
    assert credential.iterations == 8192
    assert scramp.ScramMechanism("SCRAM-SHA-512").make_auth_info(
        "alice-secret", 8192, credential.salt)[1:3] == (credential.stored_key,
                                                        credential.server_key)
    assert len(credential.salt) >= 12, "Kafka's client makes a long random salt"

    listing = ("SCRAM credential configs for user-principal 'alice' are "
               "SCRAM-SHA-512=iterations=8192")
    out = configs("--describe", *users)
    assert listing in out, out
    assert listing in configs("--describe", *alice)

    out = configs("--alter", "--delete-config", "SCRAM-SHA-512", *alice)
    assert "Completed updating config for user alice." in out, out
    assert stored(cluster).scram_credentials == {}
    # A user without credentials is left out of the listing (DescribeUserScramCredentials'
    # users() drops RESOURCE_NOT_FOUND), so the tool prints nothing at all.
    assert configs("--describe", *users) == ""
    assert configs("--describe", *alice) == ""

    # Deleting it again: Kafka's error, as the tool reports it.
    result = kafka_tools.run(CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap,
                             "--alter", "--delete-config", "SCRAM-SHA-512", *alice, check=False)
    assert result.returncode != 0
    assert "Attempt to delete a user credential that does not exist" in (
        result.stdout + result.stderr), result.describe()


def test_librdkafka_admin_client_alters_and_describes(cluster_factory):
    """confluent-kafka's AdminClient: its random salt and salted password make a credential
    scramp accepts, and a refusal reaches it as the KafkaError Kafka's code maps to."""
    cluster = cluster_factory(1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                                  4096), b"frank-pw"),
        UserScramCredentialUpsertion("grace", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512,
                                                                  16385), b"grace-pw"),
    ])
    assert futures["frank"].result(30) is None
    with pytest.raises(KafkaException) as refused:
        futures["grace"].result(30)
    assert refused.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert "Too many iterations" in refused.value.args[0].str()

    credential = stored(cluster).scram_credentials["frank"]["SCRAM-SHA-256"]
    assert len(credential.salt) >= 12
    assert scramp_login(credential, SHA256, "frank-pw")

    described = admin.describe_user_scram_credentials(["frank"])["frank"].result(30)
    assert [(info.mechanism, info.iterations) for info in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)]
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials(["grace"])["grace"].result(30)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND

    deleted = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_256)])
    assert deleted["frank"].result(30) is None
    assert admin.describe_user_scram_credentials().result(30) == {}

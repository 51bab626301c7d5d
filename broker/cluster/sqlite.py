"""The embedded coordination backend: leases and the cluster image in one SQLite file.

Every broker of a local cluster opens the same file (``kafkube.coordination.path``). WAL
mode lets readers poll while a writer commits; each write is one short ``BEGIN IMMEDIATE``
transaction, and a compare-and-set is an UPDATE guarded by the version it read. Lease
expiry uses the wall clock, as Kubernetes Leases do, which all processes on one machine share.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from broker.cluster.backend import CoordinationBackend, MetadataMissing
from broker.cluster.image import ClusterImage
from kafkube_contract.features import format_ranges, parse_ranges
from kafkube_contract.image import StoredIdentity
from kafkube_contract.registration import (
    BrokerRegistration,
    ControllerLease,
    feature_tuples,
    join_list,
    split_list,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cluster (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    cluster_id TEXT NOT NULL,
    image TEXT NOT NULL,
    version INTEGER NOT NULL,
    next_producer_id INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS brokers (
    node_id INTEGER PRIMARY KEY,
    host TEXT NOT NULL, port INTEGER NOT NULL, rack TEXT,
    broker_epoch INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    listeners TEXT NOT NULL DEFAULT '',
    offline_log_dirs TEXT NOT NULL DEFAULT '',
    offline_replicas TEXT NOT NULL DEFAULT '',
    supported_features TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS controller (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    holder INTEGER NOT NULL,
    holder_epoch INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS epochs (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


# A commit by another broker is seen at most this long after it: the reads of one poll
# share a check (they come within a millisecond), and a broker's own commits are seen at once.
RECHECK_S = 0.002


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class _Rows:
    """What the polls read, as the file held it at one ``PRAGMA data_version``: leases with
    their expiry (a lease lapses with time, not with a write, so it is judged when asked)."""

    key: tuple[int, int]  # (data_version, this connection's commits)
    brokers: tuple[tuple[int, BrokerRegistration], ...]  # (expires_ms, registration)
    controller: tuple[int, int, int] | None  # (holder, epoch, expires_ms)
    identity: StoredIdentity | None


def _registration(row: tuple) -> BrokerRegistration:
    return BrokerRegistration(*row[:6], split_list(row[6]), frozenset(split_list(row[7])),
                              supported_features=feature_tuples(parse_ranges(row[8])))


class SqliteBackend(CoordinationBackend):
    def __init__(self, path: Path, busy_timeout_s: float = 5.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.where = str(path)
        self._decoded: tuple[int, ClusterImage] | None = None  # (version, image)
        # Every broker polls the file 14 times a second (metadata, controller) and finds it
        # unchanged nearly always: the rows are read and parsed again only when a commit
        # changed the file (an idle broker's CPU 10.5-11 -> 9.5-10 ms a second with it:
        # docs/performance.md, "An idle broker").
        self._rows: _Rows | None = None
        self._commits = 0  # data_version does not count this connection's own commits
        self._checked = 0.0  # when data_version was last read (monotonic)
        self._db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        # Brokers of a local cluster start together: switching a new file to WAL can find it
        # locked by another starting broker without SQLite waiting, so retry for a while.
        deadline = time.monotonic() + busy_timeout_s
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self._db.execute("PRAGMA synchronous=NORMAL")
        with self._write() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            columns = {row[1] for row in db.execute("PRAGMA table_info(brokers)")}
            if "listeners" not in columns:  # a store written before listeners were kept
                db.execute("ALTER TABLE brokers ADD COLUMN listeners TEXT NOT NULL DEFAULT ''")
            # Added for JBOD, then for the supported feature ranges.
            for column in ("offline_log_dirs", "offline_replicas", "supported_features"):
                if column not in columns:
                    db.execute(f"ALTER TABLE brokers ADD COLUMN {column} TEXT NOT NULL "
                               "DEFAULT ''")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        self._commits += 1

    def _read_rows(self) -> _Rows:
        """The rows the polls read, re-read only when a commit changed the file since. The
        check is itself a query, so the several reads of one poll share one, made at most
        RECHECK_S apart."""
        rows = self._rows
        now = time.monotonic()
        if rows is not None and rows.key[1] == self._commits and \
                now - self._checked < RECHECK_S:
            return rows
        key = (self._db.execute("PRAGMA data_version").fetchone()[0], self._commits)
        self._checked = now
        if rows is not None and rows.key == key:
            return rows
        brokers = tuple((row[9], _registration(row)) for row in self._db.execute(
            "SELECT node_id, host, port, rack, broker_epoch, listeners, offline_log_dirs, "
            "offline_replicas, supported_features, expires_ms FROM brokers ORDER BY node_id"))
        controller = self._db.execute(
            "SELECT holder, epoch, expires_ms FROM controller").fetchone()
        identity = self._db.execute("SELECT cluster_id, version FROM cluster").fetchone()
        # A commit between the pragma and the reads leaves newer rows under the older key:
        # the next call sees another key and reads again, so nothing stale is kept.
        rows = self._rows = _Rows(key, brokers, controller,
                                  StoredIdentity(*identity) if identity else None)
        return rows

    def _next_epoch(self, db: sqlite3.Connection, name: str) -> int:
        row = db.execute("SELECT value FROM epochs WHERE name = ?", (name,)).fetchone()
        value = (row[0] if row else 0) + 1
        db.execute("INSERT OR REPLACE INTO epochs VALUES (?, ?)", (name, value))
        return value

    # -- the stored image's identity, its creation and its repair ---------------------------

    def stored_identity(self) -> StoredIdentity | None:
        return self._read_rows().identity

    def create_image(self, cluster_id: str, image: ClusterImage) -> bool:
        with self._write() as db:
            if db.execute("SELECT 1 FROM cluster").fetchone() is not None:
                return False
            db.execute("INSERT INTO cluster VALUES (0, ?, ?, ?, 0)",
                       (cluster_id, image.to_json(), image.version))
            return True

    def restore_image(self, cluster_id: str, image: ClusterImage) -> bool:
        with self._write() as db:
            if db.execute("SELECT 1 FROM cluster").fetchone() is None:
                # The producer ids handed out before are unknown: start past any of them.
                db.execute("INSERT INTO cluster VALUES (0, ?, ?, ?, ?)",
                           (cluster_id, image.to_json(), image.version, _now_ms()))
                return True
            cursor = db.execute(
                "UPDATE cluster SET image = ?, version = ?, "
                "next_producer_id = MAX(next_producer_id, ?) "
                "WHERE cluster_id = ? AND version < ?",
                (image.to_json(), image.version, _now_ms(), cluster_id, image.version))
            return cursor.rowcount == 1

    def has_history(self) -> bool:
        return any(self._db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None
                   for table in ("brokers", "epochs", "controller"))

    # -- broker liveness -------------------------------------------------------------------

    def register_broker(self, registration: BrokerRegistration, ttl_ms: int) -> int:
        r = registration
        with self._write() as db:
            epoch = self._next_epoch(db, "broker")
            db.execute(
                "INSERT OR REPLACE INTO brokers (node_id, host, port, rack, broker_epoch, "
                "expires_ms, listeners, offline_log_dirs, offline_replicas, "
                "supported_features) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.node_id, r.host, r.port, r.rack, epoch, _now_ms() + ttl_ms, r.listeners,
                 join_list(r.offline_log_dirs), join_list(r.offline_replicas),
                 format_ranges(r.feature_ranges)),
            )
        return epoch

    def update_registration(self, registration: BrokerRegistration, broker_epoch: int) -> bool:
        r = registration
        with self._write() as db:
            cursor = db.execute(
                "UPDATE brokers SET offline_log_dirs = ?, offline_replicas = ? "
                "WHERE node_id = ? AND broker_epoch = ? AND expires_ms > ?",
                (join_list(r.offline_log_dirs), join_list(r.offline_replicas), r.node_id,
                 broker_epoch, _now_ms()),
            )
            return cursor.rowcount == 1

    def renew_broker(self, node_id: int, broker_epoch: int, ttl_ms: int) -> bool:
        now = _now_ms()
        with self._write() as db:
            cursor = db.execute(
                "UPDATE brokers SET expires_ms = ? "
                "WHERE node_id = ? AND broker_epoch = ? AND expires_ms > ?",
                (now + ttl_ms, node_id, broker_epoch, now),
            )
            return cursor.rowcount == 1

    def unregister_broker(self, node_id: int, broker_epoch: int) -> None:
        with self._write() as db:
            db.execute("DELETE FROM brokers WHERE node_id = ? AND broker_epoch = ?",
                       (node_id, broker_epoch))

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        now = _now_ms()
        return {r.node_id: r for expires, r in self._read_rows().brokers if expires > now}

    def lease_expiries(self) -> dict[int, int]:
        now = _now_ms()
        return {r.node_id: expires for expires, r in self._read_rows().brokers if expires > now}

    # -- controller election --------------------------------------------------------------

    def acquire_controller(self, node_id: int, broker_epoch: int, ttl_ms: int) -> int | None:
        now = _now_ms()
        with self._write() as db:
            row = db.execute(
                "SELECT holder, holder_epoch, epoch, expires_ms FROM controller"
            ).fetchone()
            if row is not None:
                holder, holder_epoch, epoch, expires = row
                if holder == node_id and holder_epoch == broker_epoch:
                    if expires <= now:
                        # Our lease lapsed (we were paused): someone may have acted as
                        # controller meanwhile, so this is a new term.
                        epoch = self._next_epoch(db, "controller")
                    db.execute("UPDATE controller SET expires_ms = ?, epoch = ?",
                               (now + ttl_ms, epoch))
                    return epoch
                if expires > now and holder != node_id:
                    return None
            epoch = self._next_epoch(db, "controller")
            db.execute("INSERT OR REPLACE INTO controller VALUES (0, ?, ?, ?, ?)",
                       (node_id, broker_epoch, epoch, now + ttl_ms))
            return epoch

    def resign_controller(self, node_id: int) -> None:
        with self._write() as db:
            db.execute("DELETE FROM controller WHERE holder = ?", (node_id,))

    def controller(self) -> ControllerLease | None:
        row = self._read_rows().controller
        return ControllerLease(row[0], row[1]) if row and row[2] > _now_ms() else None

    # -- cluster image ---------------------------------------------------------------------

    def image_version(self) -> int:
        identity = self._read_rows().identity
        if identity is None:
            raise MetadataMissing(f"{self.path} holds no cluster image")
        return identity.version

    def read_image(self) -> ClusterImage:
        """Decoded once per version: the controller reads the image several times a round,
        and at 10,000 partitions each decode took tens of milliseconds of the event loop."""
        decoded = self._decoded
        known = self.image_version()
        if decoded is None or decoded[0] != known:
            row = self._db.execute("SELECT image, version FROM cluster").fetchone()
            if row is None:  # deleted since the version was read
                self._rows = None
                raise MetadataMissing(f"{self.path} holds no cluster image")
            text, version = row
            if version != known:
                # Written since the rows were read: read them again at the next call, or the
                # guard would hold this image against an older stored version and judge
                # the store gone back.
                self._rows = None
            decoded = self._decoded = (version, ClusterImage.from_json(text, version))
        return decoded[1]

    def write_image(self, image: ClusterImage) -> bool:
        with self._write() as db:
            cursor = db.execute(
                "UPDATE cluster SET image = ?, version = version + 1 WHERE version = ?",
                (image.to_json(), image.version),
            )
            return cursor.rowcount == 1

    def allocate_producer_ids(self, count: int) -> int:
        with self._write() as db:
            row = db.execute("SELECT next_producer_id FROM cluster").fetchone()
            if row is None:
                raise MetadataMissing(f"{self.path} holds no cluster image")
            first = row[0]
            db.execute("UPDATE cluster SET next_producer_id = ?", (first + count,))
            return first

    def close(self) -> None:
        self._db.close()

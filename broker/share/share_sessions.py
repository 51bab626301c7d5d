"""Share sessions (KIP-932): a share consumer's ShareFetch requests to one broker form a session,
as a consumer's fetches form an incremental fetch session (KIP-227). Epoch 0 opens it with the
partitions named; each later request carries the next epoch and names only the partitions to
add (or to forget); -1 closes it, and the records the member holds on its partitions are
released, as they are when the connection the session was opened on closes (Kafka 4's rule).
A request with a wrong epoch is refused (INVALID_SHARE_SESSION_EPOCH), one for a
session this broker does not have too (SHARE_SESSION_NOT_FOUND): the consumer opens a new one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

OPEN, CLOSE = 0, -1
SharePartitionId = tuple[uuid.UUID, int]  # topic id, partition


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # what the next request must carry
    partitions: dict[SharePartitionId, None] = field(default_factory=dict)  # ordered set
    last_used: float = field(default_factory=time.monotonic)
    connection: object | None = None  # the connection it was opened on


class SessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ShareSessions:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # group.share.max.share.sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open_or_continue(self, group_id: str, member_id: str, epoch: int,
                         added: list[SharePartitionId], forgotten: list[SharePartitionId],
                         connection: object | None = None
                         ) -> tuple[ShareSession, ShareSession | None]:
        """The session a ShareFetch belongs to, moved to its next epoch; with epoch 0, also
        the session it replaces. The member keeps the records it holds: a client opens a
        new session after any failed request, still holding them (as in Kafka, only epoch
        -1, the member leaving, or their locks running out give them back)."""
        key = (group_id, member_id)
        if epoch == OPEN:
            old = self.sessions.pop(key, None)
            if len(self.sessions) >= self.limit:
                if old is not None:
                    self.sessions[key] = old
                raise SessionError(ErrorCode.share_session_limit_reached,
                                   f"The limit of {self.limit} share sessions is reached.")
            session = self.sessions[key] = ShareSession(group_id, member_id,
                                                        connection=connection)
            session.partitions.update(dict.fromkeys(added))
            return session, old
        session = self.current(group_id, member_id, epoch)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        session.partitions.update(dict.fromkeys(added))
        if epoch != CLOSE:
            session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return session, None

    def current(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The member's session, if ``epoch`` is the one it expects (or -1, to close it)."""
        session = self.sessions.get((group_id, member_id))
        if session is not None:
            session.last_used = time.monotonic()
        if session is None:
            raise SessionError(ErrorCode.share_session_not_found,
                               f"No share session for member {member_id} of {group_id}.")
        if epoch != CLOSE and epoch != session.epoch:
            raise SessionError(ErrorCode.invalid_share_session_epoch,
                               f"The share session epoch is {session.epoch}, not {epoch}.")
        return session

    def advance(self, session: ShareSession) -> None:
        session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def evict_idle(self, now: float, idle: Callable[[str], float]) -> list[ShareSession]:
        """Sessions nobody used for their group's ``idle`` seconds (their consumer died or
        went away): removed, so dead consumers do not fill the cache."""
        gone = [key for key, s in self.sessions.items() if now - s.last_used >= idle(key[0])]
        return [self.sessions.pop(key) for key in gone]

    def closed_connection(self, connection: object) -> list[ShareSession]:
        """The sessions opened on a connection that closed: removed (Kafka releases what a
        share consumer holds when its connection goes, as franz-go's documentation warns)."""
        gone = [key for key, s in self.sessions.items() if s.connection is connection]
        return [self.sessions.pop(key) for key in gone]

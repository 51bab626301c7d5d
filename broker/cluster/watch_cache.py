"""A watch cache: the objects of one kind as of the latest list or watch event (client-go's
informer pattern), so the Kubernetes backend answers its reads without waiting on the API
server and keeps answering them while it is slow or down."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import watch
from kubernetes.client.rest import ApiException

from broker.cluster.contact import Contact
from kafkube_contract.objects import REQUEST_TIMEOUT_S

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 60


def unreachable(error: BaseException) -> bool:
    """No answer from the API server (refused, reset, timed out), or one saying it cannot
    serve (5xx, e.g. etcd down); a conflict or a 404 is an answer."""
    if isinstance(error, ApiException):
        return not 0 < (error.status or 0) < 500
    return isinstance(error, OSError | urllib3.exceptions.HTTPError)


def _revision(obj: Any) -> int:
    """An object's resourceVersion as a number. Kubernetes calls it opaque, but with etcd it
    is the object's modification revision, which only grows; the watch cache compares them
    so that a late watch event never replaces what a write of ours already returned."""
    try:
        return int(obj.metadata.resource_version)
    except (TypeError, ValueError):
        return 0



class WatchCache:
    """Objects of one kind as of the latest list or watch event, kept by a daemon thread:
    list, then watch from the list's resourceVersion, and list again when the watch ends in
    410 Gone or an error (an API server restart)."""

    def __init__(self, kind: str, item_type: type, list_fn: Callable[..., Any], selector: str,
                 on_change: Callable[[], None], contact: Contact,
                 on_put: Callable[[Any], None] | None = None) -> None:
        self.kind = kind
        self._deleted: dict[str, str] = {}  # name -> uid of the last one seen deleted
        self._on_put = on_put  # sees each object as it arrives (lease renewals are timed)
        self._item_type = item_type  # the watch cannot tell it from a lambda's signature
        self._contact = contact
        self._list = list_fn
        self._selector = selector
        self._on_change = on_change
        self._objects: dict[str, Any] = {}
        self._gone: dict[str, Any] = {}  # name -> the last one seen deleted
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._watch: watch.Watch | None = None
        self.lists = self.watches = self.bookmarks = 0  # for tests and debugging
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)
        self._thread.start()

    def get(self, name: str) -> Any:
        with self._lock:
            return self._objects.get(name)

    def items(self) -> list[Any]:
        with self._lock:
            return list(self._objects.values())

    def gone_uid(self, name: str) -> str | None:
        """The uid of the last object of this name a DELETED event showed deleted, if any:
        only a proof of deletion (a ``deletionTimestamp``), never an object that stopped
        matching the selector (a label removed: its DELETED event carries the object as it
        was, without one), nor one missing from a fresh list (the same may have happened
        while the watch was down)."""
        with self._lock:
            return self._deleted.get(name)

    def last_seen(self, name: str) -> Any:
        """The object as it is, or as it was last seen before it was deleted."""
        with self._lock:
            return self._objects.get(name) or self._gone.get(name)

    def put(self, obj: Any) -> None:
        """Take in an object a write of ours returned (or a watch event), unless ours is
        already newer."""
        name = obj.metadata.name
        with self._lock:
            known = self._objects.get(name)
            if known is not None and _revision(known) > _revision(obj):
                return
            self._objects[name] = obj
        if self._on_put is not None:
            self._on_put(obj)
        self._on_change()

    def forget(self, name: str, deleted: Any = None) -> None:
        """Drop an object: one we found gone, or one a DELETED event names, unless what we
        hold is newer (recreated by a write of ours after that deletion)."""
        with self._lock:
            known = self._objects.get(name)
            if known is None or (deleted is not None and _revision(known) > _revision(deleted)):
                return
            del self._objects[name]
            if deleted is not None:
                self._gone[name] = deleted
                if deleted.metadata.deletion_timestamp is not None:
                    self._deleted[name] = deleted.metadata.uid
        self._on_change()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def stop(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.stop()

    def _run(self) -> None:
        backoff = 0.2
        while not self._stopped.is_set():
            try:
                listed = self._list(label_selector=self._selector,
                                    _request_timeout=REQUEST_TIMEOUT_S)
                self._contact.reached()
                self.lists += 1
                with self._lock:
                    fresh = {o.metadata.name: o for o in listed.items}
                    for name, obj in self._objects.items():  # deleted while we were not watching
                        if fresh.get(name) is None or fresh[name].metadata.uid != obj.metadata.uid:
                            self._gone[name] = obj
                    self._objects = fresh
                self._synced.set()
                self._on_change()
                backoff = 0.2
                self._follow(listed.metadata.resource_version)
            except Exception as e:  # any failure: list again after a pause
                if self._stopped.is_set():
                    return
                if unreachable(e):
                    self._contact.lost(e)
                log.info("watch of %s ended (%s); listing again in %.1fs", self.kind, e, backoff)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _follow(self, resource_version: str) -> None:
        while not self._stopped.is_set():
            self._watch = watch.Watch(return_type=self._item_type)
            self.watches += 1
            for event in self._watch.stream(
                    self._list, label_selector=self._selector, resource_version=resource_version,
                    timeout_seconds=WATCH_TIMEOUT_S, allow_watch_bookmarks=True,
                    _request_timeout=WATCH_TIMEOUT_S + REQUEST_TIMEOUT_S):
                kind, obj = event["type"], event["object"]
                self._contact.reached()  # the server is there: leases are judged by it
                if kind == "ERROR":
                    raise RuntimeError(f"watch error: {getattr(obj, 'message', obj)}")
                if kind == "BOOKMARK":  # only a resourceVersion to go on from, as a dict
                    resource_version = obj["metadata"]["resourceVersion"]
                    self.bookmarks += 1
                    continue
                resource_version = obj.metadata.resource_version
                if kind == "DELETED":
                    self.forget(obj.metadata.name, obj)
                elif kind in ("ADDED", "MODIFIED"):
                    self.put(obj)
            # The server closed the watch after its timeout: go on from where it was.

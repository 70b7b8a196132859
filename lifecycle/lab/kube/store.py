"""The stand-in's etcd: objects, one resourceVersion counter, and a journal that watches replay.

Why it exists: every client-visible guarantee of the API — optimistic
concurrency, watches that resume from a resourceVersion, 410 Gone when that
version is too old, an object leaving a selector's view arriving as DELETED —
rests on one ordered history of writes. The store is used from the server's
one event loop only, and none of its methods awaits, so a read-check-write in
a handler is atomic without a lock.
"""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lifecycle.lab.kube.kinds import Kind

Obj = dict[str, Any]
JOURNAL_SIZE = 2000
Key = tuple[tuple[str, str], str | None, str]
CLOSE = "racklife:close"


@dataclass
class Event:
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    prev: Obj | None

    @property
    def version(self) -> int:
        return int(self.obj["metadata"]["resourceVersion"])


@dataclass
class Journal:
    """The last events of one resource kind, and the open watches on it."""

    events: collections.deque[Event] = field(default_factory=lambda: collections.deque(maxlen=JOURNAL_SIZE))
    floor: int = 0
    """resourceVersion of the newest event that fell out: a watch from before it gets 410."""
    watchers: set[asyncio.Queue[Event | str]] = field(default_factory=set)

    def add(self, event: Event) -> None:
        if self.events.maxlen and len(self.events) == self.events.maxlen:
            self.floor = self.events[0].version
        self.events.append(event)
        for queue in self.watchers:
            queue.put_nowait(event)


class Store:
    def __init__(self) -> None:
        self.objects: dict[Key, Obj] = {}
        self.version = 0
        self.journals: dict[tuple[str, str], Journal] = collections.defaultdict(Journal)

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        obj = self.objects.get((kind.key, namespace if kind.namespaced else None, name))
        return copy.deepcopy(obj) if obj is not None else None

    def items(self, kind: Kind, namespace: str | None = None) -> Iterator[Obj]:
        """Stored objects of ``kind`` (one namespace, or all when None); not copies — do not change them."""
        for (key, ns, _), obj in self.objects.items():
            if key == kind.key and (namespace is None or ns == namespace):
                yield obj

    def put(self, kind: Kind, obj: Obj, prev: Obj | None) -> Obj:
        """Store a new version of an object, stamp its resourceVersion, tell the watches."""
        meta = obj["metadata"]
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        self.objects[(kind.key, meta.get("namespace") if kind.namespaced else None, meta["name"])] = obj
        self.journals[kind.key].add(Event("ADDED" if prev is None else "MODIFIED", copy.deepcopy(obj), prev))
        return copy.deepcopy(obj)

    def remove(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        key = (kind.key, namespace if kind.namespaced else None, name)
        prev = self.objects.pop(key)
        self.version += 1
        gone = copy.deepcopy(prev)
        gone["metadata"]["resourceVersion"] = str(self.version)
        self.journals[kind.key].add(Event("DELETED", gone, prev))
        return copy.deepcopy(gone)

    def watch(self, kind: Kind) -> asyncio.Queue[Event | str]:
        queue: asyncio.Queue[Event | str] = asyncio.Queue()
        self.journals[kind.key].watchers.add(queue)
        return queue

    def unwatch(self, kind: Kind, queue: asyncio.Queue[Event | str]) -> None:
        self.journals[kind.key].watchers.discard(queue)

    def close_watches(self) -> None:
        for journal in self.journals.values():
            for queue in journal.watchers:
                queue.put_nowait(CLOSE)

    def clear(self) -> None:
        """Forget every object; watches from before now get 410 Gone."""
        self.close_watches()
        self.objects.clear()
        for journal in self.journals.values():
            journal.events.clear()
            journal.floor = self.version

"""Shared reflectors: one list+watch and one store per resource and scope for a whole process.

Four of the manager's controllers follow every Node; each with its own reflector, a fleet of
5,000 nodes would be listed, watched and held four times. ``Informers`` hands out one
``watching.Reflector`` per (resource, namespace, label selector, field selector, shape), as
client-go's SharedInformerFactory does: the first consumer creates it, later ones add their
handler to it (``add_handler``); every reflector keeps what its ``trimming.Shape`` says (a
consumer that needs other fields asks with another shape and gets its own reflector). Shared
values of trimmed objects go through one ``trimming.Sharing`` for the process.

The owner runs them (``run``, until cancelled: every reflector a task of one TaskGroup, named
``informer: <resource>``); reflectors must all be asked for before ``run`` starts, since
the handlers of a reflector must be there for its first list.
"""

from __future__ import annotations

import asyncio
import dataclasses

from kubecontrol import kubeapi, trimming, watching


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    watch_timeout: int = 300
    """Server-side timeout of one watch request (seconds); the watch is then resumed."""
    backoff_initial: float = 0.5
    backoff_cap: float = 30.0
    """Reconnect back-off of the reflectors."""
    page_size: int | None = watching.DEFAULT_PAGE_SIZE
    """Objects per list page (None: whole lists in one request)."""
    shape: trimming.Shape | None = trimming.WITHOUT_MANAGED_FIELDS
    """What a reflector keeps when its consumer names no shape (None: whole objects)."""
    sharing_entries: int = 16384
    """Bound of the memo of shared values (``trimming.Sharing``)."""


_Scope = tuple[kubeapi.Resource, str | None, str | None, str | None, int]


class Informers:
    def __init__(self, api: kubeapi.KubeApi, settings: Settings = Settings()) -> None:
        self.api = api
        self.settings = settings
        self.sharing = trimming.Sharing(settings.sharing_entries)
        self.reflectors: dict[_Scope, watching.Reflector] = {}
        self._shapes: dict[int, trimming.Shape | None] = {}
        """Shapes by id, held so that an id in a scope is never reused for another."""
        self._said_hints: set[str] = set()
        self._running = False

    def reflector(
        self,
        resource: kubeapi.Resource,
        on_event: watching.Handler,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        shape: trimming.Shape | None = None,
        absent_hint: str = "",
    ) -> watching.Reflector:
        """The shared reflector of this scope, ``on_event`` added to its handlers."""
        chosen = shape if shape is not None else self.settings.shape
        self._shapes[id(chosen)] = chosen
        scope = (resource, namespace, label_selector, field_selector, id(chosen))
        if self._running:
            raise RuntimeError(f"informers run already: cannot follow {resource.plural} now")
        found = self.reflectors.get(scope)
        if found is not None:
            found.add_handler(on_event)
            return found
        s = self.settings
        reflector = watching.Reflector(
            self.api,
            resource,
            on_event,
            watch_timeout=s.watch_timeout,
            backoff_initial=s.backoff_initial,
            backoff_cap=s.backoff_cap,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            absent_hint=absent_hint,
            said_hints=self._said_hints,
            shape=chosen,
            sharing=self.sharing,
            page_size=s.page_size,
        )
        self.reflectors[scope] = reflector
        return reflector

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors.values())

    async def run(self) -> None:
        """Run every reflector until cancelled."""
        self._running = True
        async with asyncio.TaskGroup() as tg:
            for (resource, namespace, *_), reflector in self.reflectors.items():
                where = f" in {namespace}" if namespace else ""
                tg.create_task(reflector.run(), name=f"informer: {resource.plural}{where}")

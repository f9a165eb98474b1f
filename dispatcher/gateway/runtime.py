"""What the gateway's handlers share: the dispatcher client, settings, storage per region."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from dispatcher.client import Client
from dispatcher.gateway.images import FetchSlots
from dispatcher.gateway.settings import GatewaySettings
from storage import ObjectStore, open_store


@dataclass
class Runtime:
    client: Client
    settings: GatewaySettings
    _objects: dict[str, ObjectStore] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    fetch_slots: FetchSlots = field(init=False)

    def __post_init__(self) -> None:
        self.fetch_slots = FetchSlots(
            self.settings.url_fetches, self.settings.url_fetches_per_tenant
        )

    @property
    def home(self) -> str:
        """The region a submit through this gateway names as home: for a cell's gateway its
        region, so each tenant's jobs go to the tenant's own cell whichever gateway took them."""
        return self.client.topology.region(self.settings.region).group

    def objects(self, region: str) -> ObjectStore:
        with self._lock:
            if region not in self._objects:
                self._objects[region] = open_store(self.client.topology.region(region).storage)
            return self._objects[region]

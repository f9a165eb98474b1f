"""Motion add-ons on a worker: where they are, reading one, and the in-memory LRU that keeps
them off the request's critical path.

An add-on is a directory ``<addons root>/<name>/`` holding ``addon.safetensors``: peft-named
LoRA weights (``<layer>.lora_A.weight`` (r, in[, k, k]), ``<layer>.lora_B.weight``
(out, r[, 1, 1])) with metadata ``base`` (the model directory name it was trained on),
``rank`` and ``alpha``; or, with metadata ``kind: control``, an image-conditioned branch
(:mod:`workers.model.addons.control_branch`) that takes a control image per job. Workers serve the
add-ons made for their model; the store loads them in a background thread at boot (and
whenever asked), keeps them in memory up to a byte cap, least recently used out first, and a
job only waits for one that is not there yet.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from animfleet.addons import control_input
from animfleet.jobs import JobParams
from workers.model.addons.control_branch import (
    ControlAddonError,
    ControlEncoder,
    ControlHooks,
    read_control,
)
from workers.model.addons.control_run import BranchRunner
from workers.model.addons.lora_branch import LoraBranches, LowRank
from workers.model.networks.motion_unet import MotionUNet

log = logging.getLogger("animfleet.worker.addons")

WEIGHTS_FILE = "addon.safetensors"
# The MotionUNet layers add-ons adapt, and so the layers a worker gives a branch: the motion
# head, which turns the prompt and each frame's position into that frame's similarity
# transform. Every add-on motion is such a trajectory, and the head sees one vector per frame,
# so its branches cost microseconds a call; on the flow head (a 3x3 conv over every frame) a
# branch cost about 2% of a job.
TARGETS = ("motion_head.0", "motion_head.2", "motion_head.4")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_KEY = re.compile(r"^(?P<layer>.+)\.lora_(?P<part>[AB])\.weight$")


class AddonError(ValueError):
    """An add-on is missing, malformed or made for another model."""


@dataclass(frozen=True)
class Addon:
    """One add-on in memory: its deltas per layer name, ready for :class:`LoraBranches`."""

    name: str
    base: str
    layers: dict[str, LowRank]
    control: ControlEncoder | None = None  # an image-conditioned add-on's branch

    @property
    def nbytes(self) -> int:
        branch = self.control.parameters() if self.control is not None else ()
        return sum(delta.nbytes for delta in self.layers.values()) + sum(
            p.numel() * p.element_size() for p in branch
        )


def addons_root(model_dir: Path) -> Path:
    """Where a model's add-ons live: ``addons/`` beside the model's directory."""
    return model_dir.parent / "addons"


def available(root: Path, base: str) -> list[str]:
    """Names of the add-ons under ``root`` trained for the model named ``base``, sorted."""
    return sorted(kinds(root, base))


def kinds(root: Path, base: str) -> dict[str, str]:
    """The add-ons under ``root`` for the model named ``base``: name -> kind (``lora`` or
    ``control``)."""
    found = {}
    for path in sorted(root.glob(f"*/{WEIGHTS_FILE}")):
        name = path.parent.name
        if not NAME_PATTERN.match(name):
            continue
        with safe_open(str(path), framework="pt") as handle:
            meta = handle.metadata() or {}
        if meta.get("base") == base:
            found[name] = meta.get("kind", "lora")
    return found


def read_addon(
    path: Path, name: str, base: str, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> Addon:
    """Read ``<path>/addon.safetensors``; raises :class:`AddonError` if it is missing,
    malformed or made for another base model."""
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise AddonError(f"add-on {name!r} has no {WEIGHTS_FILE} in {path}")
    with safe_open(str(weights), framework="pt") as handle:
        meta = handle.metadata() or {}
        if meta.get("kind") == "control":
            try:
                return Addon(name, base, {}, read_control(path, name, base, dtype, device))
            except ControlAddonError as error:
                raise AddonError(str(error)) from error
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    if meta.get("base") != base:
        raise AddonError(f"add-on {name!r} is for {meta.get('base')!r}, not {base!r}")
    try:
        scaling = float(meta["alpha"]) / float(meta["rank"])
    except (KeyError, ValueError, ZeroDivisionError) as error:
        raise AddonError(f"add-on {name!r} lacks a valid rank and alpha: {error}") from error
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.match(key)
        if match is None:
            raise AddonError(f"add-on {name!r} has an unexpected tensor {key!r}")
        parts.setdefault(match["layer"], {})[match["part"]] = tensor
    layers = {}
    for layer, pair in parts.items():
        if set(pair) != {"A", "B"}:
            raise AddonError(f"add-on {name!r} lacks half of layer {layer!r}")
        up = pair["B"] * scaling
        if pair["A"].dim() == 4 and up.dim() == 2:
            up = up[:, :, None, None]
        layers[layer] = LowRank(
            pair["A"].to(device, dtype).contiguous(), up.to(device, dtype).contiguous()
        )
    return Addon(name, base, layers)


class AddonStore:
    """The add-ons a worker holds in memory: LRU under ``cap_bytes``, loaded in the background.

    :meth:`prefetch` queues loads on one background thread and returns at once; :meth:`get`
    returns a held add-on, waits for one being loaded, or loads it itself. Everything is
    thread-safe.
    """

    def __init__(
        self,
        root: Path,
        base: str,
        cap_bytes: int = 64 << 20,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
    ) -> None:
        self.root, self.base, self.cap_bytes = root, base, cap_bytes
        self.dtype, self.device = dtype, device
        self._held: OrderedDict[str, Addon] = OrderedDict()
        self._loading: dict[str, Future[Addon]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="addon-prefetch")
        self.hits = self.misses = self.evictions = 0
        self.load_seconds = 0.0
        self._branches: LoraBranches | None = None
        self._controls: ControlHooks | None = None
        self._kinds: dict[str, str] | None = None
        self.runner = BranchRunner(device)

    def attach(self, model: nn.Module) -> LoraBranches:
        """Give ``model``'s :data:`TARGETS` their branches and, if it serves a control
        add-on, its control hooks (once); raises ValueError if it lacks one of them."""
        if self._branches is None:
            self._branches = LoraBranches(model, TARGETS)
            if self.with_image():
                self._controls = ControlHooks(model)
        return self._branches

    @property
    def branches(self) -> LoraBranches:
        """The branches of the model :meth:`attach` was given; raises RuntimeError before."""
        if self._branches is None:
            raise RuntimeError("no model attached to the add-on store")
        return self._branches

    def names(self) -> list[str]:
        """The add-ons this worker can serve (on disk for its model when first asked)."""
        if self._kinds is None:
            self._kinds = kinds(self.root, self.base) if self.root.is_dir() else {}
        return sorted(self._kinds)

    def with_image(self) -> list[str]:
        """Those of :meth:`names` that take a control image per job."""
        self.names()
        assert self._kinds is not None
        return sorted(name for name, kind in self._kinds.items() if kind == "control")

    def held(self) -> list[str]:
        """Names in memory, least recently used first."""
        with self._lock:
            return list(self._held)

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return sum(addon.nbytes for addon in self._held.values())

    def prefetch(self, names: Iterable[str]) -> list[Future[Addon]]:
        """Start loading each servable name not held, in the background; returns the pending
        loads (names this worker lacks are left to :meth:`get` to refuse)."""
        pending = []
        servable = set(self.names())
        with self._lock:
            for name in names:
                if name in self._held or name not in servable:
                    continue
                future = self._loading.get(name)
                if future is None:
                    future = self._pool.submit(self._load, name)
                    self._loading[name] = future
                pending.append(future)
        return pending

    def get(self, name: str) -> Addon:
        """The add-on ``name``, from memory if held; raises :class:`AddonError`."""
        if not NAME_PATTERN.match(name):
            raise AddonError(f"{name!r} is not an add-on name")
        with self._lock:
            addon = self._held.get(name)
            if addon is not None:
                self._held.move_to_end(name)
                self.hits += 1
                return addon
            self.misses += 1
            future = self._loading.get(name)
        if future is not None:
            return future.result()
        return self._load(name)

    def _load(self, name: str) -> Addon:
        started = time.perf_counter()
        try:
            addon = read_addon(self.root / name, name, self.base, self.dtype, self.device)
        finally:
            with self._lock:
                self._loading.pop(name, None)
        with self._lock:
            self.load_seconds += time.perf_counter() - started
            self._held[name] = addon
            self._held.move_to_end(name)
            while len(self._held) > 1 and self._total() > self.cap_bytes:
                evicted, _ = self._held.popitem(last=False)
                self.evictions += 1
                log.info("addons.evicted %s (cap %d bytes)", evicted, self.cap_bytes)
        return addon

    def _total(self) -> int:
        return sum(addon.nbytes for addon in self._held.values())

    def activate(
        self,
        uses: Sequence[tuple[str, float]],
        images: Mapping[str, bytes] | None = None,
        size: tuple[int, int] = (64, 64),
    ) -> contextlib.AbstractContextManager[Any]:
        """A context manager running the attached model with each ``(name, scale)`` add-on:
        a LoRA on its branches, a control add-on with its control image from ``images``
        (by name), its branch started now for a ``size`` (width, height) job, beside
        whatever runs before the U-Net needs it. Raises :class:`AddonError` for an add-on it
        cannot load or a control add-on without its image."""
        deltas, controls = [], []
        for name, scale in uses:
            addon = self.get(name)
            if addon.control is None:
                deltas.append((addon.layers, scale))
                continue
            image = (images or {}).get(name)
            if image is None or self._controls is None:
                raise AddonError(f"add-on {name!r} needs its control image, which the job lacks")
            controls.append((addon.control, image, scale))
        # Checked and loaded now; nothing is switched until the context is entered.
        return self._running(deltas, controls, size)

    @contextlib.contextmanager
    def _running(
        self,
        deltas: list[tuple[dict[str, LowRank], float]],
        controls: list[tuple[ControlEncoder, bytes, float]],
        size: tuple[int, int],
    ) -> Iterator[None]:
        pending = [(self.runner.start(branch, image, *size), s) for branch, image, s in controls]
        with self.branches.activate(deltas), contextlib.ExitStack() as stack:
            if pending:
                assert self._controls is not None
                stack.enter_context(self._controls.activate(pending))
            yield

    def close(self) -> None:
        """Stop the background threads (pending loads finish first)."""
        self._pool.shutdown(wait=True)
        self.runner.close()


def open_addons(model_dir: Path, pipeline: Any, device: str = "cpu") -> AddonStore | None:
    """The add-on store of a MotionUNet model that has add-ons beside it, attached to its
    U-Net and already loading every add-on in the background; None otherwise."""
    unet = getattr(pipeline, "unet", None)
    if not isinstance(unet, MotionUNet):
        return None
    store = AddonStore(addons_root(model_dir), model_dir.name, dtype=unet.dtype, device=device)
    names = store.names()
    if not names:
        store.close()
        return None
    store.attach(unet)
    store.prefetch(names)
    return store


def job_addons(
    store: AddonStore | None,
    params: JobParams,
    inputs: Mapping[str, bytes],
    eager: contextlib.AbstractContextManager[Any] | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """A context manager running one job's add-ons (``params.addons``; the control images
    from the job's ``inputs`` by input name), inside ``eager`` when given; with none, the
    base model. Raises :class:`AddonError` for an add-on ``store`` cannot serve, at once:
    nothing is switched until the context is entered."""
    if not params.addons:
        return contextlib.nullcontext()
    if store is None:
        raise AddonError("this worker's model serves no add-ons")
    images = {
        use.name: inputs[control_input(use.name)]
        for use in params.addons
        if control_input(use.name) in inputs
    }
    uses = [(use.name, use.scale) for use in params.addons]
    activation = store.activate(uses, images, (params.width, params.height))
    return activation if eager is None else _within(eager, activation)


@contextlib.contextmanager
def _within(
    outer: contextlib.AbstractContextManager[Any], inner: contextlib.AbstractContextManager[Any]
) -> Iterator[None]:
    with outer, inner:
        yield

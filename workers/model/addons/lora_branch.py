"""LoRA deltas as a parallel low-rank branch beside a model's own layers, per call.

SwiftDiffusion's point: fusing an add-on into the weights (load, ``W += s * B @ A``, run,
unfuse) puts the add-on's loading and patching on every request's critical path, and leaves
the weights changed (``W + d - d`` is not ``W`` in floating point). Here the base weights are
never touched: each targeted ``nn.Linear`` / ``nn.Conv2d`` gets a forward hook that, while
deltas are active, adds ``scale * up(down(x))`` to the layer's output. With none active the
hook returns nothing, so the layer's output is exactly the base computation, bit for bit.

Hooks rather than replacement modules keep the model's parameter names, so its state dict,
its content hash and its compiled packages stay those of the base model.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LowRank:
    """One layer's delta: ``down`` (r, in[, k, k]) then ``up`` (out, r[, 1, 1]); the LoRA's
    ``alpha / r`` is already folded into ``up``."""

    down: torch.Tensor
    up: torch.Tensor

    @property
    def nbytes(self) -> int:
        return (
            self.down.numel() * self.down.element_size() + self.up.numel() * self.up.element_size()
        )


class LoraBranch:
    """The forward hook of one layer: its base output plus the active deltas.

    A request's deltas on a layer run either factored (``up(down(x))`` per add-on) or, where
    that is cheaper, as one dense delta ``sum(scale * up @ down)`` built when the request
    starts: a LoRA on a narrow-output conv (the flow head: 2 outputs) costs more factored
    than its whole dense kernel, and any number of add-ons then cost one extra small op.
    """

    def __init__(self, layer: nn.Linear | nn.Conv2d) -> None:
        self.layer = layer
        self.active: tuple[tuple[LowRank, float], ...] = ()
        self.dense: torch.Tensor | None = None
        self.handle = layer.register_forward_hook(self._hook)

    def set(self, deltas: Sequence[tuple[LowRank, float]]) -> None:
        """Make ``deltas`` (each with its scale) the active ones; empty: the base layer."""
        self.active, self.dense = (), None
        if not deltas:
            return
        weight = self.layer.weight
        # Multiply-adds per output position: r * (in + out) per add-on factored, out * in dense.
        factored_cost = sum(d.down.numel() + d.up.numel() for d, _ in deltas)
        if factored_cost < weight.numel():
            self.active = tuple(deltas)
            return
        dense = torch.zeros_like(weight)
        for delta, scale in deltas:
            up = delta.up.flatten(1)  # (out, r)
            dense += scale * (up @ delta.down.flatten(1)).view_as(weight)
        self.dense = dense

    def _hook(self, module: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor) -> Any:
        if self.dense is None and not self.active:
            return None  # the base output, untouched
        x = inputs[0]
        if self.dense is not None:
            output = output + self._dense(x, self.dense)
        for delta, scale in self.active:
            output = output + scale * self._delta(x, delta)
        return output

    def _dense(self, x: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        layer = self.layer
        if isinstance(layer, nn.Linear):
            return F.linear(x, dense)
        return F.conv2d(x, dense, None, layer.stride, layer.padding, layer.dilation)

    def _delta(self, x: torch.Tensor, delta: LowRank) -> torch.Tensor:
        layer = self.layer
        if isinstance(layer, nn.Linear):
            return F.linear(F.linear(x, delta.down), delta.up)
        # A conv LoRA: the layer's own kernel geometry down to r channels, then a 1x1 conv up.
        hidden = F.conv2d(x, delta.down, None, layer.stride, layer.padding, layer.dilation)
        return F.conv2d(hidden, delta.up)


class LoraBranches:
    """Branches on a model's targeted layers and the deltas active on them for one call.

    ``activate`` is a context manager: deltas apply inside it and are gone after, whatever
    happens. One model runs one call at a time (a worker runs one job), so a lock only
    guards against misuse.
    """

    def __init__(self, model: nn.Module, targets: Sequence[str]) -> None:
        """Raises ValueError for a target that is not a Linear or Conv2d of ``model``."""
        modules = dict(model.named_modules())
        self.branches: dict[str, LoraBranch] = {}
        for name in targets:
            layer = modules.get(name)
            if not isinstance(layer, nn.Linear | nn.Conv2d):
                raise ValueError(f"{name!r} is not a Linear or Conv2d layer of the model")
            self.branches[name] = LoraBranch(layer)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def activate(self, deltas: Sequence[tuple[Mapping[str, LowRank], float]]) -> Iterator[None]:
        """Run the model with each ``(layer name -> delta, scale)`` added; none: the base.

        Raises ValueError for a delta on a layer without a branch.
        """
        if not deltas:
            yield
            return
        with self._lock:
            per_layer: dict[str, list[tuple[LowRank, float]]] = {}
            for layers, scale in deltas:
                for name, delta in layers.items():
                    if name not in self.branches:
                        raise ValueError(f"an add-on targets {name!r}, which has no branch")
                    per_layer.setdefault(name, []).append((delta, scale))
            try:
                with torch.no_grad():
                    for name, active in per_layer.items():
                        self.branches[name].set(active)
                yield
            finally:
                for branch in self.branches.values():
                    branch.set(())

    def remove(self) -> None:
        """Take every hook off (the model is exactly the base model again)."""
        for branch in self.branches.values():
            branch.handle.remove()
        self.branches.clear()

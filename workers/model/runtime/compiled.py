"""torch.compile of the denoiser (and optionally the VAE decoder), with compilations counted.

Modules are compiled in place (``nn.Module.compile``), so pipelines keep calling them as before
and forward hooks (the context de-duplication's) are traced with them. Shapes are static
(``dynamic=False``): each shape bucket gets its own graph at warm-up, and a request of a warmed
bucket runs without compiling. Every graph the backend receives is counted; one received after
warm-up is a recompilation and is logged. If compiling fails, the modules go back to eager.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch._dynamo

log = logging.getLogger("animfleet.worker.compile")


class CompiledModules:
    """The modules compiled for one pipeline, and how many graphs compiling them took."""

    def __init__(self, modules: dict[str, torch.nn.Module], max_buckets: int = 8) -> None:
        self.modules = modules
        self.graphs = 0
        self.recompiles = 0
        self.warm = False
        self._inductor: Callable[..., Any] | None = None
        # One cache entry per bucket (static shapes); above the limit dynamo would fall back
        # to eager for new shapes, which is slower but still correct.
        torch._dynamo.config.recompile_limit = max(
            torch._dynamo.config.recompile_limit, max_buckets + 2
        )
        for module in modules.values():
            module.compile(backend=self._backend, dynamic=False)

    def _backend(self, graph: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1
        if self.warm:
            self.recompiles += 1
            shapes = [tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)][:4]
            log.warning("model.recompiled graphs=%d input_shapes=%s", self.graphs, shapes)
        if self._inductor is None:
            from torch._dynamo.backends.registry import lookup_backend

            self._inductor = lookup_backend("inductor")
        return self._inductor(graph, example_inputs)

    def finish_warmup(self) -> None:
        """From now on, any compilation counts as a recompilation."""
        self.warm = True

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        """Run the modules eagerly inside (the warm-up's reference), compiled again after."""
        with torch.compiler.set_stance("force_eager"):
            yield

    def to_eager(self) -> None:
        """Undo the compilation: the modules run eagerly again."""
        for module in self.modules.values():
            module._compiled_call_impl = None
        torch._dynamo.reset()


def compile_modules(pipe: Any, decoder: bool, max_buckets: int) -> CompiledModules:
    """Compile ``pipe.unet`` (and ``pipe.vae.decoder`` with ``decoder``) in place."""
    modules: dict[str, torch.nn.Module] = {"unet": pipe.unet}
    vae_decoder = getattr(pipe.vae, "decoder", None)
    if decoder and isinstance(vae_decoder, torch.nn.Module):
        modules["vae_decoder"] = vae_decoder
    return CompiledModules(modules, max_buckets)

"""Ahead-of-time compiled U-Nets: torch.export + AOTInductor packages.

``animfleet model compile`` writes ``aot/<key>/`` beside the model: a ``.pt2`` package per
listed shape bucket (static shapes, the hot ones), one package exported with symbolic frames,
height and width that covers every other size the worker can run (:class:`SizeRange`: square
and non-square working sizes, masked boxes), and ``manifest.json``. The key names what a package
is valid for: the torch version, the device (on CPU also the vector ISA inductor generated code
for), the precision and a hash of the U-Net's weights (baked into the package). A worker whose
key matches loads the packages in seconds instead of compiling for minutes; any mismatch is
reported and the worker compiles or serves eagerly instead.

The loaded packages replace the U-Net's ``forward`` (the module stays, so its config, dtype and
parameters still answer the pipeline): a call whose input shape has a static package runs it,
else one the dynamic package covers runs that, and any other runs the eager forward, logged
(``model.aot_miss``) and counted (``animfleet_model_unet_calls_total{path="eager"}``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from workers.metrics import UNET_CALLS
from workers.model.runtime.profile import device_key, weights_hash

log = structlog.stdlib.get_logger("animfleet.worker.aot")

AOT_DIR = "aot"
MANIFEST = "manifest.json"
Shape = tuple[int, ...]


class SizeRange(BaseModel):
    """The U-Net inputs the dynamic package was exported for: batch and channels as recorded,
    any frame count in ``frames`` and any height and width in ``side`` that divide by
    ``multiple`` (inclusive bounds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch: int
    channels: int
    frames: tuple[int, int]
    side: tuple[int, int]
    multiple: int

    def covers(self, shape: Shape) -> bool:
        if len(shape) != 5:
            return False
        batch, frames, channels, height, width = shape
        sides_fit = all(
            self.side[0] <= side <= self.side[1] and side % self.multiple == 0
            for side in (height, width)
        )
        return (
            (batch, channels) == (self.batch, self.channels)
            and self.frames[0] <= frames <= self.frames[1]
            and sides_fit
        )

    def label(self) -> str:
        (low, high), (small, large) = self.frames, self.side
        return f"{low}-{high} frames, sides {small}-{large} (multiples of {self.multiple})"

    def dims(self) -> tuple[Any, ...]:
        """torch.export's dynamic shapes for :class:`_Denoise`'s inputs."""
        dim = torch.export.Dim
        frames = dim("frames", min=self.frames[0], max=self.frames[1])
        low, high = (side // self.multiple for side in self.side)
        rows, cols = dim("rows", min=low, max=high), dim("cols", min=low, max=high)
        sample = {1: frames, 3: self.multiple * rows, 4: self.multiple * cols}
        return (sample, None, None, None, None)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    torch: str
    device: str
    isa: str
    weights: str
    precision: str
    context_dedup: bool
    # "3x8x8x8x8" (the U-Net's input shape) -> package file name
    packages: dict[str, str]
    # The package exported with symbolic sizes, and the sizes it covers; None: not built.
    dynamic: str | None = None
    dynamic_range: SizeRange | None = None
    # package file name -> seconds its export and compile took
    build_s: dict[str, float] = {}


def vector_isa(device: str = "cpu") -> str:
    """The CPU vector ISA inductor compiles for ("avx512", "avx2", ...); "" off CPU."""
    if device != "cpu":
        return ""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    return str(pick_vec_isa()).split()[0] or "scalar"


def artifact_key(model_dir: Path, precision: str, device: str = "cpu") -> tuple[str, Manifest]:
    """The directory name artifacts for this torch, device, ISA, weights and precision live in,
    and the manifest fields they must carry."""
    expected = Manifest(
        torch=torch.__version__,
        device=device_key(device),
        isa=vector_isa(device),
        weights=weights_hash(model_dir),
        precision=precision,
        context_dedup=False,
        packages={},
    )
    parts = [expected.device, expected.isa, f"torch{expected.torch}", expected.weights, precision]
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", "-".join(p for p in parts if p)), expected


def shape_name(shape: Shape) -> str:
    return "x".join(str(size) for size in shape)


class _Denoise(torch.nn.Module):
    """The U-Net call the pipeline makes, as tensors in and one tensor out (for export)."""

    def __init__(self, unet: torch.nn.Module) -> None:
        super().__init__()
        self.unet = unet

    def forward(
        self,
        sample: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        added_time_ids: torch.Tensor,
        guidance_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        extra = {} if guidance_scale is None else {"guidance_scale": guidance_scale}
        out = self.unet(
            sample,
            timestep,
            encoder_hidden_states=encoder_hidden_states,
            added_time_ids=added_time_ids,
            return_dict=False,
            **extra,
        )
        result: torch.Tensor = out[0]
        return result


def _inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The U-Net call's tensors in :class:`_Denoise`'s order; the timestep as a 0-d float."""
    names = ("sample", "timestep", "encoder_hidden_states", "added_time_ids")
    values = {**dict(zip(names, args, strict=False)), **kwargs}
    timestep = torch.as_tensor(values["timestep"], dtype=torch.float32).reshape(())
    return (
        values["sample"],
        timestep,
        values["encoder_hidden_states"],
        values["added_time_ids"],
        values.get("guidance_scale"),
    )


def _package(
    wrapper: _Denoise, inputs: tuple[Any, ...], path: Path, dims: tuple[Any, ...] | None = None
) -> float:
    """Export and compile one package; seconds it took."""
    started = time.perf_counter()
    with torch.no_grad():
        program = torch.export.export(wrapper, inputs, dynamic_shapes=dims, strict=False)
        torch._inductor.aoti_compile_and_package(
            program, package_path=str(path), inductor_configs={"freezing": True}
        )
    return round(time.perf_counter() - started, 1)


def build_packages(
    unet: torch.nn.Module,
    calls: dict[Shape, tuple[Any, ...]],
    out_dir: Path,
    manifest: Manifest,
    sizes: SizeRange | None = None,
) -> Manifest:
    """Export and AOT-compile ``unet`` for each recorded call (shape -> :func:`_inputs`), and
    with ``sizes`` one package for all of them, from the first call it covers."""
    out_dir.mkdir(parents=True, exist_ok=True)
    packages, seconds = {}, {}
    wrapper = _Denoise(unet).eval()
    for shape, inputs in calls.items():
        name = f"unet-{shape_name(shape)}.pt2"
        seconds[name] = _package(wrapper, inputs, out_dir / name)
        packages[shape_name(shape)] = name
    update: dict[str, Any] = {"packages": packages, "build_s": seconds}
    example = next(
        (inputs for shape, inputs in calls.items() if sizes and sizes.covers(shape)), None
    )
    if sizes is not None and example is not None:
        name = "unet-dynamic.pt2"
        seconds[name] = _package(wrapper, example, out_dir / name, sizes.dims())
        update.update(dynamic=name, dynamic_range=sizes)
    done = manifest.model_copy(update=update)
    (out_dir / MANIFEST).write_text(done.model_dump_json(indent=2) + "\n")
    return done


@dataclass
class _Output:
    sample: torch.Tensor


class AOTDenoiser:
    """Loaded packages standing in for the U-Net's forward; see the module docstring.

    ``ran`` counts the calls served since loading by path: ``aot`` (a static package),
    ``aot-dynamic`` (the dynamic one) or ``eager`` (no package covers the shape)."""

    def __init__(
        self,
        unet: torch.nn.Module,
        runners: Mapping[Shape, Callable[..., Any]],
        dynamic: tuple[SizeRange, Callable[..., Any]] | None = None,
    ) -> None:
        self.unet = unet
        self.runners = dict(runners)
        self.dynamic = dynamic
        self.modules = ["unet"]
        self.misses = 0
        self.bypass = False
        self.ran: Counter[str] = Counter()
        self._missed: set[Shape] = set()
        unet.forward = self._forward

    def runner(self, shape: Shape) -> tuple[str, Callable[..., Any] | None]:
        """What serves a U-Net input of ``shape``: its path and package (None: eager)."""
        static = self.runners.get(shape)
        if static is not None:
            return "aot", static
        if self.dynamic is not None and self.dynamic[0].covers(shape):
            return "aot-dynamic", self.dynamic[1]
        return "eager", None

    def _forward(self, *args: Any, return_dict: bool = True, **kwargs: Any) -> Any:
        shape = tuple(args[0].shape if args else kwargs["sample"].shape)
        path, runner = ("eager", None) if self.bypass else self.runner(shape)
        if not self.bypass:
            self.ran[path] += 1
            UNET_CALLS.labels(path).inc()
        if runner is None:
            if not self.bypass and shape not in self._missed:
                self._missed.add(shape)
                self.misses += 1
                log.warning("model.aot_miss", input_shape=shape, serving="eager")
            return type(self.unet).forward(self.unet, *args, return_dict=return_dict, **kwargs)
        out: torch.Tensor = runner(*_inputs(args, kwargs))
        return _Output(out) if return_dict else (out,)

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        """Run the eager U-Net inside (the warm-up's reference)."""
        self.bypass = True
        try:
            yield
        finally:
            self.bypass = False

    def to_eager(self) -> None:
        """Drop the packages: the U-Net runs its own forward again."""
        self.unet.__dict__.pop("forward", None)
        self.runners = {}
        self.dynamic = None

    @property
    def recompiles(self) -> int:
        return self.misses

    def finish_warmup(self) -> None:
        """Nothing compiles later; a shape without a package is logged as a miss."""


def load_packages(
    unet: torch.nn.Module, model_dir: Path, precision: str, context_dedup: bool, device: str = "cpu"
) -> tuple[AOTDenoiser | None, str]:
    """Install the matching packages on ``unet``; (None, why not) when there are none."""
    key, expected = artifact_key(model_dir, precision, device)
    root = model_dir / AOT_DIR
    directory = root / key
    if not (directory / MANIFEST).is_file():
        others = sorted(p.parent.name for p in root.glob(f"*/{MANIFEST}")) if root.is_dir() else []
        found = f"; found {', '.join(others)}" if others else ""
        return None, f"no artifact {key} under {root}{found}"
    try:
        manifest = Manifest.model_validate_json((directory / MANIFEST).read_text())
    except ValidationError as error:
        return None, f"{directory / MANIFEST}: {error}"
    fields = ("torch", "device", "isa", "weights", "precision")
    wrong = [
        f"{field} {getattr(manifest, field)} != {getattr(expected, field)}"
        for field in fields
        if getattr(manifest, field) != getattr(expected, field)
    ]
    if manifest.context_dedup != context_dedup:
        wrong.append(f"context_dedup {manifest.context_dedup} != {context_dedup}")
    if wrong:
        return None, f"artifact {key} does not match: {'; '.join(wrong)}"
    runners = {}
    for name, file in manifest.packages.items():
        shape = tuple(int(size) for size in name.split("x"))
        runners[shape] = torch._inductor.aoti_load_package(str(directory / file))
    dynamic = None
    if manifest.dynamic is not None and manifest.dynamic_range is not None:
        package = torch._inductor.aoti_load_package(str(directory / manifest.dynamic))
        dynamic = (manifest.dynamic_range, package)
    covers = f" and a dynamic one for {dynamic[0].label()}" if dynamic else ""
    denoiser = AOTDenoiser(unet, runners, dynamic)
    return denoiser, f"loaded {len(runners)} static packages{covers} from {directory}"

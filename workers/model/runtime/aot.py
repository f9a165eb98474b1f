"""Ahead-of-time compiled U-Nets: torch.export + AOTInductor packages, one per shape bucket.

``animfleet model compile`` writes ``aot/<key>/`` beside the model: a ``.pt2`` package per
bucket and ``manifest.json``. The key names what a package is valid for: the torch version, the
device (on CPU also the vector ISA inductor generated code for), the precision and a hash of the
U-Net's weights (baked into the package). A worker whose key matches loads the packages in
seconds instead of compiling for minutes; any mismatch is reported and the worker compiles or
serves eagerly instead.

The loaded packages replace the U-Net's ``forward`` (the module stays, so its config, dtype and
parameters still answer the pipeline): a call whose input shape has a package runs it, any other
shape runs the eager forward.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from workers.model.runtime.profile import device_key, weights_hash

log = logging.getLogger("animfleet.worker.aot")

AOT_DIR = "aot"
MANIFEST = "manifest.json"
Shape = tuple[int, ...]


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


def build_packages(
    unet: torch.nn.Module,
    calls: dict[Shape, tuple[Any, ...]],
    out_dir: Path,
    manifest: Manifest,
) -> Manifest:
    """Export and AOT-compile ``unet`` for each recorded call (shape -> :func:`_inputs`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    packages = {}
    wrapper = _Denoise(unet).eval()
    for shape, inputs in calls.items():
        with torch.no_grad():
            program = torch.export.export(wrapper, inputs, strict=False)
            name = f"unet-{shape_name(shape)}.pt2"
            torch._inductor.aoti_compile_and_package(
                program, package_path=str(out_dir / name), inductor_configs={"freezing": True}
            )
        packages[shape_name(shape)] = name
    done = manifest.model_copy(update={"packages": packages})
    (out_dir / MANIFEST).write_text(done.model_dump_json(indent=2) + "\n")
    return done


@dataclass
class _Output:
    sample: torch.Tensor


class AOTDenoiser:
    """Loaded packages standing in for the U-Net's forward; see the module docstring."""

    def __init__(self, unet: torch.nn.Module, runners: Mapping[Shape, Callable[..., Any]]) -> None:
        self.unet = unet
        self.runners = dict(runners)
        self.modules = ["unet"]
        self.misses = 0
        self.bypass = False
        self._missed: set[Shape] = set()
        unet.forward = self._forward

    def _forward(self, *args: Any, return_dict: bool = True, **kwargs: Any) -> Any:
        shape = tuple(args[0].shape if args else kwargs["sample"].shape)
        runner = None if self.bypass else self.runners.get(shape)
        if runner is None:
            if not self.bypass and shape not in self._missed:
                self._missed.add(shape)
                self.misses += 1
                log.warning("model.aot_miss input_shape=%s serving it eagerly", shape)
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
    return AOTDenoiser(unet, runners), f"loaded {len(runners)} packages from {directory}"

"""``make demo``: a local fleet, one real job through the real dispatcher, the MP4 checked."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any, Literal

import av
import numpy as np
from PIL import Image, ImageDraw
from tqdm import tqdm

from animfleet import logs
from launcher.local_fleet import LocalFleet


def decode_mp4(data: bytes) -> tuple[list[np.ndarray], float]:
    """All frames (RGB arrays) of an MP4 and its frame rate."""
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        return frames, float(stream.average_rate or 0)


def demo_photo() -> Path:
    """A real photograph nobody on the project made: matplotlib's sample portrait."""
    import matplotlib

    return Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"


# The brushed demo: scikit-learn's china.jpg (a pagoda over a lake), the lake flowing left,
# the sky drifting right, as a seamless loop. Polygons and strokes in fractions of the photo.
# The lake's mask keeps clear of the trees: a flow draws its upstream edge's pixels in.
WATER = ((0.57, 0.54), (0.80, 0.54), (0.80, 0.64), (0.74, 0.68), (0.66, 0.72), (0.58, 0.74))
SKY = ((0.53, 0.0), (1.0, 0.0), (1.0, 0.27), (0.53, 0.27))


def brushed_demo() -> tuple[bytes, list[dict[str, Any]], tuple[int, int]]:
    """The demo photograph (PNG), its two regions (as ``Client.submit`` takes them) and the
    video's (width, height): 512 px wide at the photograph's aspect ratio."""
    from tools.training.data.photos import photo_uint8

    photo = Image.fromarray(photo_uint8("china"))
    width, height = photo.size

    def mask(polygon: tuple[tuple[float, float], ...]) -> bytes:
        canvas = Image.new("L", photo.size, 0)
        ImageDraw.Draw(canvas).polygon([(x * width, y * height) for x, y in polygon], fill=255)
        buffer = io.BytesIO()
        canvas.save(buffer, format="PNG")
        return buffer.getvalue()

    buffer = io.BytesIO()
    photo.save(buffer, format="PNG")
    regions = [
        {"mask": mask(WATER), "kind": "flow", "stroke": [[0.78, 0.6], [0.6, 0.63]], "speed": 1.5},
        {"mask": mask(SKY), "kind": "drift", "stroke": [[0.6, 0.12], [0.9, 0.12]], "speed": 1.0},
    ]
    return buffer.getvalue(), regions, (512, round(512 * height / width / 8) * 8)


def contact_sheet(frames: list[np.ndarray], path: Path, scale: int = 2) -> Path:
    """All frames side by side as one PNG: small videos enlarged, large ones (above 128 px)
    at half size in two rows."""
    if frames[0].shape[0] > 128:
        half = [np.asarray(Image.fromarray(f).reduce(2)) for f in frames]
        rows = (half[: (len(half) + 1) // 2], half[(len(half) + 1) // 2 :])
        if len(rows[1]) < len(rows[0]):
            rows[1].append(np.zeros_like(half[0]))
        Image.fromarray(np.concatenate([np.concatenate(r, axis=1) for r in rows])).save(path)
        return path
    strip = np.concatenate(frames, axis=1)
    image = Image.fromarray(strip)
    image = image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)
    image.save(path)
    return path


def run_demo(
    root: Path,
    image: Path,
    prompt: str,
    storage: Literal["local", "s3"],
    frames: int,
    out: Path,
    size: int = 64,
    brush: bool = False,
) -> int:
    """One job through a local fleet; with ``brush``, the brushed demo (:func:`brushed_demo`:
    two regions, a seamless loop, 512 px wide) instead of ``image`` and ``prompt``."""
    from dispatcher import Client
    from storage import open_store

    logs.configure("WARNING")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"starting a local fleet (private Redis, {storage} storage, one worker per region)…")
    with LocalFleet(root, storage=storage) as fleet:
        up = time.perf_counter() - started
        print(f"fleet up in {up:.1f}s: regions {', '.join(fleet.regions)}; model {fleet.model_dir}")
        client = Client(fleet.topology)
        data, options = image.read_bytes(), dict[str, Any](width=size, height=size)
        if brush:
            data, regions, (width, height) = brushed_demo()
            options = {"width": width, "height": height, "regions": regions, "loop": True}
            prompt = "still"
        job = client.submit(data, prompt, home_region=fleet.regions[0], frames=frames, **options)
        print(f"submitted {job.id} to {job.region} ({prompt!r})")
        with tqdm(total=1, desc="queued", unit="step") as bar:
            record = job.get()
            while not record.status.terminal:
                if record.progress.total and record.progress.step != bar.n:
                    bar.total = record.progress.total
                    bar.set_description(record.status.value, refresh=False)
                    bar.update(record.progress.step - bar.n)
                time.sleep(0.05)
                record = job.get()
            bar.set_description(record.status.value)
            bar.update(bar.total - bar.n)
        if record.output is None:
            print(f"job {record.status.value}: {record.error}")
            return 1
        region = fleet.topology.region(record.region)
        store = open_store(region.storage)
        video = store.get(record.output.key)
        path = out / f"{record.id}.mp4"
        path.write_bytes(video)
        decoded, fps = decode_mp4(video)
        sheet = contact_sheet(decoded, out / f"{record.id}.png")
        url = store.presigned_url(record.output.key, region.storage.presign_expiry_s)
    metrics, output = record.metrics, record.output
    height, width = decoded[0].shape[:2]
    rows = [
        ("id", record.id),
        ("status", f"{record.status.value} after {record.attempts} attempt(s) in {record.region}"),
        ("output", f"{output.key} ({output.bytes} bytes, {output.content_type})"),
        ("presigned url", url if len(url) <= 100 else url[:100] + "…"),
        ("queue time", f"{metrics.queue_time:.3f}s"),
        ("inference", f"{metrics.inference_time:.3f}s"),
        ("encode", f"{metrics.encode_time:.3f}s"),
        ("upload", f"{metrics.upload_time:.3f}s"),
        ("total", f"{metrics.total_time:.3f}s"),
        ("decoded", f"{len(decoded)} frames of {width}x{height} at {fps:g} fps"),
        ("mp4", str(path)),
        ("contact sheet", str(sheet)),
    ]
    print("\njob summary")
    for name, value in rows:
        print(f"  {name:<14}{value}")
    print(f"demo finished in {time.perf_counter() - started:.1f}s")
    if len(decoded) != frames:
        print(f"expected {frames} frames, decoded {len(decoded)}")
        return 1
    return 0

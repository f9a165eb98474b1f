"""The submit's PNG pixel check against Pillow's full decode (``make bench-image-check``).

Inputs: scikit-image's bundled colour photographs (no download) resized to 512 px on the long
side and saved as PNG (what a submit usually carries), and a 4096x4096 16-bit RGBA PNG of zeros
(130 KB that inflate to 128 MiB: the upload that stalled the gateway). Each is checked both ways in
alternating rounds (who goes first alternates too) so machine noise hits both alike:

- time per check (median of the rounds), and the ratio Pillow / pixel check;
- peak memory each adds to a fresh process (``ru_maxrss`` of a child that only checks);
- the longest a 1 ms ticker thread waits meanwhile: how long a check keeps the interpreter
  lock from the threads answering requests.

PASS/FAIL lines: the pixel check at least as fast as Pillow on the photographs (why it is
kept), and on the zero PNG at most 32 MiB added and no stall over 50 ms (or over Pillow's own,
measured in the same run, on a machine busy enough that a stall shows without any check).
"""

from __future__ import annotations

import io
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable

from PIL import Image

from dispatcher.png_pixels import pixels_intact

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field")
ROUNDS = 7
MAX_MEMORY_BYTES = 32 * 2**20
MAX_STALL_S = 0.050


def photographs() -> dict[str, bytes]:
    """scikit-image's photographs, 512 px on the long side, as PNG."""
    from skimage import data

    made = {}
    for name in PHOTOS:
        image = Image.fromarray(getattr(data, name)()).convert("RGB")
        image.thumbnail((512, 512))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        made[name] = buffer.getvalue()
    return made


def zero_png(side: int = 4096) -> bytes:
    """A ``side``-square 16-bit RGBA PNG of zeros."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    head = struct.pack(">IIBBBBB", side, side, 16, 6, 0, 0, 0)
    rows = zlib.compress(bytes((1 + side * 8) * side), 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def pillow(data: bytes) -> None:
    with Image.open(io.BytesIO(data)) as image:
        image.load()


def pixel_check(data: bytes) -> None:
    assert pixels_intact(data)


WAYS: dict[str, Callable[[bytes], None]] = {"Pillow load": pillow, "pixel check": pixel_check}


def seconds(check: Callable[[bytes], None], data: bytes, repeat: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        check(data)
    return (time.perf_counter() - started) / repeat


def longest_stall(check: Callable[[bytes], None], data: bytes) -> float:
    """The longest a thread sleeping 1 ms at a time waited beyond that while ``check`` ran."""
    stalls: list[float] = []
    running = threading.Event()
    running.set()

    def tick() -> None:
        while running.is_set():
            started = time.perf_counter()
            time.sleep(0.001)
            stalls.append(time.perf_counter() - started - 0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    check(data)
    running.clear()
    ticker.join()
    return max(stalls, default=0.0)


def added_memory(way: str, data: bytes) -> int:
    """Bytes a fresh process's peak resident set grows by checking ``data`` one way (read
    from a file, so that making it costs the child nothing)."""
    with tempfile.NamedTemporaryFile(suffix=".png") as file:
        file.write(data)
        file.flush()
        code = (
            "import resource; from pathlib import Path; from benchmarks import image_check as b; "
            f"data = Path({file.name!r}).read_bytes(); "
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
            f"b.WAYS[{way!r}](data); "
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)"
        )
        answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    answer.check_returncode()
    return int(answer.stdout.strip())


def main() -> int:
    inputs = {**photographs(), "zero 4096x4096x16-bit": zero_png()}
    times: dict[tuple[str, str], list[float]] = {}
    for round_index in range(ROUNDS):
        ways = list(WAYS.items())
        for name, data in inputs.items():
            repeat = 1 if name.startswith("zero") else 10
            for way, check in ways if round_index % 2 else reversed(ways):
                times.setdefault((name, way), []).append(seconds(check, data, repeat))
    print(f"{'image':<24}{'bytes':>9}{'Pillow ms':>11}{'pixel ms':>10}{'ratio':>8}")
    ratios = []
    for name, data in inputs.items():
        base = statistics.median(times[(name, "Pillow load")])
        mine = statistics.median(times[(name, "pixel check")])
        if not name.startswith("zero"):
            ratios.append(base / mine)
        ratio = base / mine
        print(f"{name:<24}{len(data):>9}{base * 1000:>11.2f}{mine * 1000:>10.2f}{ratio:>7.2f}x")
    zero = inputs["zero 4096x4096x16-bit"]
    print(f"\n{'zero PNG':<24}{'added MiB':>10}{'stall ms':>10}")
    found = {}
    for way, check in WAYS.items():
        memory, stall = added_memory(way, zero), longest_stall(check, zero)
        found[way] = (memory, stall)
        print(f"{way:<24}{memory / 2**20:>10.1f}{stall * 1000:>10.1f}")
    photo_memory = {way: added_memory(way, inputs[PHOTOS[0]]) for way in WAYS}
    print(
        f"{PHOTOS[0]} (512 px), added MiB: "
        + ", ".join(f"{way} {memory / 2**20:.1f}" for way, memory in photo_memory.items())
    )
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    median_ratio = statistics.median(ratios)
    memory, stall = found["pixel check"]
    checks = [
        (median_ratio >= 1.0, f"pixel check vs Pillow on 512 px photographs: {median_ratio:.2f}x"),
        (memory <= MAX_MEMORY_BYTES, f"zero PNG memory added {memory / 2**20:.1f} MiB <= 32"),
        (
            stall <= max(MAX_STALL_S, found["Pillow load"][1]),
            f"zero PNG longest stall {stall * 1000:.1f} ms <= 50 or Pillow's "
            f"({found['Pillow load'][1] * 1000:.1f} ms: a machine's own noise)",
        ),
    ]
    for passed, line in checks:
        print(("PASS " if passed else "FAIL ") + line)
    return 0 if all(passed for passed, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

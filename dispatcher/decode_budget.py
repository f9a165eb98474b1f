"""How many pixels this process checks at once: the memory and the cores image checks take.

Pillow holds a decoded image whole (about 4 bytes a pixel: 64 MiB for 4096x4096), so twenty
large images decoded at once by twenty request threads would take over a gigabyte, and twenty
pixel streams inflated at once would take every core from the threads answering requests. A
check holds its image's pixel count from this budget while it runs; one that does not fit
sleeps until others finish (an image larger than the whole budget runs alone). A 512 px photo
is a quarter of a megapixel: ordinary traffic never waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_PIXELS = 16 * 2**20  # one 4096x4096 image: at most 64 MiB of decoded pixels


class PixelBudget:
    """A budget of pixels in check at once, shared by the threads of a process."""

    def __init__(self, pixels: int = DEFAULT_PIXELS) -> None:
        self.pixels = pixels
        self._used = 0
        self._free = threading.Condition()

    @contextmanager
    def hold(self, pixels: int) -> Iterator[None]:
        """Hold ``pixels`` of the budget while the block runs, waiting until they fit."""
        with self._free:
            self._free.wait_for(lambda: not self._used or self._used + pixels <= self.pixels)
            self._used += pixels
        try:
            yield
        finally:
            with self._free:
                self._used -= pixels
                self._free.notify_all()

    @property
    def used(self) -> int:
        """Pixels in check now."""
        return self._used


DECODES = PixelBudget()  # the process's budget; the gateway sizes it from its settings

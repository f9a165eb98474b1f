"""Frames to an MP4 that every player opens: H.264, yuv420p, moov atom first (faststart)."""

from __future__ import annotations

import os
import tempfile
from fractions import Fraction

import av
import numpy as np
import numpy.typing as npt

from animfleet.errors import PermanentError
from workers.errors import WorkerError


class EncodeError(WorkerError, PermanentError, RuntimeError):
    """The frames could not be encoded."""


def encode_mp4(frames: npt.NDArray[np.uint8], fps: int, crf: int = 18) -> bytes:
    """Encode ``frames`` (T, H, W, 3 uint8 RGB; H and W even) as an H.264 MP4 at ``fps``.

    The muxer rewrites the file to move the index to the front, so it needs a real file.
    """
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise EncodeError(f"frames must be (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    count, height, width, _ = frames.shape
    if count < 1 or height % 2 or width % 2:
        raise EncodeError(f"need >= 1 frame of even size for yuv420p, got {count}x{height}x{width}")
    fd, path = tempfile.mkstemp(suffix=".mp4", prefix="animfleet-")
    os.close(fd)
    try:
        with av.open(path, "w", format="mp4", options={"movflags": "+faststart"}) as container:
            stream = container.add_stream("libx264", rate=Fraction(fps))
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.options = {"crf": str(crf), "preset": "veryfast"}
            for frame in frames:
                video_frame = av.VideoFrame.from_ndarray(
                    np.ascontiguousarray(frame), format="rgb24"
                )
                container.mux(stream.encode(video_frame))
            container.mux(stream.encode(None))
        with open(path, "rb") as handle:
            return handle.read()
    except av.FFmpegError as error:
        raise EncodeError(f"H.264 encoding failed: {error}") from error
    finally:
        os.unlink(path)

import io

import av
import numpy as np
import pytest

from workers.encode import EncodeError, encode_mp4


def test_encodes_playable_h264_with_index_first() -> None:
    frames = np.random.default_rng(0).integers(0, 255, (12, 48, 64, 3), dtype=np.uint8)
    data = encode_mp4(frames, fps=12)
    assert data.index(b"moov") < data.index(b"mdat")  # faststart: playable while downloading
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        assert stream.codec_context.pix_fmt == "yuv420p"
        assert float(stream.average_rate) == 12
        decoded = list(container.decode(stream))
    assert len(decoded) == 12 and (decoded[0].width, decoded[0].height) == (64, 48)


@pytest.mark.parametrize(
    "frames",
    [
        np.zeros((4, 33, 64, 3), np.uint8),
        np.zeros((4, 32, 32), np.uint8),
        np.zeros((4, 8, 8, 3), np.float32),
    ],
)
def test_rejects_unencodable_frames(frames: np.ndarray) -> None:
    with pytest.raises(EncodeError):
        encode_mp4(frames, fps=8)

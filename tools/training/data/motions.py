"""The motion vocabulary: what each prompt means as a per-frame similarity transform.

Conventions (documented in the model card). Image coordinates are normalised to [-1, 1], x to the
right, y down. A content point at ``p`` in frame 0 appears at ``exp(zoom) * R(angle) @ p + shift``
in frame ``f``. "pan left" is a camera move: the camera turns left, so the content moves right.
"zoom in" magnifies the content; "rotate clockwise" turns the content clockwise on screen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class Motion(StrEnum):
    """Every motion a prompt can ask for, plus ``static``; also the classifier's labels."""

    PAN_LEFT = "pan_left"
    PAN_RIGHT = "pan_right"
    PAN_UP = "pan_up"
    PAN_DOWN = "pan_down"
    ZOOM_IN = "zoom_in"
    ZOOM_OUT = "zoom_out"
    ROTATE_CW = "rotate_cw"
    ROTATE_CCW = "rotate_ccw"
    BOUNCE = "bounce"
    SWAY = "sway"
    STATIC = "static"

    @property
    def family(self) -> str:
        """``pan``, ``zoom``, ``rotate``, ``bounce``, ``sway`` or ``static``."""
        return self.value.split("_")[0]


FAMILIES = ("pan", "zoom", "rotate", "bounce", "sway", "static")

# Per-frame magnitudes at speed 1.0, in normalised units (the frame is 2 wide).
PAN_PER_FRAME = 0.06
ZOOM_PER_FRAME = 0.04  # log-scale
ROTATE_PER_FRAME = math.radians(3.0)
OSCILLATION_AMPLITUDE = 0.15

SPEEDS = {"slow": 0.5, "normal": 1.0, "fast": 1.8}
SPEED_WORDS = {"slow": ("slowly", "slow", "gently"), "normal": ("",), "fast": ("quickly", "fast")}

_PAN_DIRECTION = {
    Motion.PAN_LEFT: (1.0, 0.0),  # camera left: content moves right
    Motion.PAN_RIGHT: (-1.0, 0.0),
    Motion.PAN_UP: (0.0, 1.0),  # camera up: content moves down (y points down)
    Motion.PAN_DOWN: (0.0, -1.0),
}

# Phrasings per motion, all inside the tokenizer's vocabulary; "{s}" is the speed word.
TEMPLATES: dict[Motion, tuple[str, ...]] = {
    Motion.PAN_LEFT: ("pan left {s}", "{s} pan left", "camera pan left {s}", "move left {s}"),
    Motion.PAN_RIGHT: ("pan right {s}", "{s} pan right", "camera pan right {s}", "move right {s}"),
    Motion.PAN_UP: ("pan up {s}", "{s} tilt up", "camera tilt up {s}", "move up {s}"),
    Motion.PAN_DOWN: ("pan down {s}", "{s} tilt down", "camera tilt down {s}", "move down {s}"),
    Motion.ZOOM_IN: ("zoom in {s}", "{s} zoom in", "camera zoom in {s}"),
    Motion.ZOOM_OUT: ("zoom out {s}", "{s} zoom out", "camera zoom out {s}"),
    Motion.ROTATE_CW: ("rotate clockwise {s}", "{s} spin clockwise", "turn clockwise {s}"),
    Motion.ROTATE_CCW: (
        "rotate counterclockwise {s}",
        "{s} spin anticlockwise",
        "turn counterclockwise {s}",
    ),
    Motion.BOUNCE: ("bounce {s}", "{s} bounce up and down", "the scene bounce {s}"),
    Motion.SWAY: ("sway {s}", "{s} sway left and right", "the scene sway {s}"),
    Motion.STATIC: ("static", "still", "stay still", "static camera"),
}


@dataclass(frozen=True)
class Transform:
    """Content motion of one frame relative to frame 0."""

    shift_x: float
    shift_y: float
    log_scale: float
    angle: float  # radians, positive = clockwise on screen


def transform(motion: Motion, speed: float, frame: int, num_frames: int) -> Transform:
    """Where frame ``frame`` of a ``num_frames`` clip has moved the content of frame 0."""
    if motion in _PAN_DIRECTION:
        dx, dy = _PAN_DIRECTION[motion]
        step = PAN_PER_FRAME * speed * frame
        return Transform(dx * step, dy * step, 0.0, 0.0)
    if motion in (Motion.ZOOM_IN, Motion.ZOOM_OUT):
        sign = 1.0 if motion is Motion.ZOOM_IN else -1.0
        return Transform(0.0, 0.0, sign * ZOOM_PER_FRAME * speed * frame, 0.0)
    if motion in (Motion.ROTATE_CW, Motion.ROTATE_CCW):
        sign = 1.0 if motion is Motion.ROTATE_CW else -1.0
        return Transform(0.0, 0.0, 0.0, sign * ROTATE_PER_FRAME * speed * frame)
    # Oscillations complete one full period over the clip, so the last frame returns home.
    phase = math.sin(2 * math.pi * frame / max(num_frames - 1, 1))
    amplitude = OSCILLATION_AMPLITUDE * speed
    if motion is Motion.BOUNCE:
        return Transform(0.0, -amplitude * abs(phase), 0.0, 0.0)  # up (negative y) and back
    if motion is Motion.SWAY:
        return Transform(amplitude * phase, 0.0, 0.0, 0.0)
    return Transform(0.0, 0.0, 0.0, 0.0)


def prompt_for(motion: Motion, speed_name: str, template: int, word: int) -> str:
    """One phrasing of ``motion`` at ``speed_name``; indices pick template and speed word."""
    templates = TEMPLATES[motion]
    words = SPEED_WORDS[speed_name]
    text = templates[template % len(templates)].format(s=words[word % len(words)])
    return " ".join(text.split())

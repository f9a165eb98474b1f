"""Every bound of a job request, stated once: the gateway's schema (so its OpenAPI document), the
dispatcher's validation and the SDK's request types are built from these names."""

from __future__ import annotations

from typing import Literal

# The motion to animate.
MAX_PROMPT_CHARS = 500
# Not blank; no control characters but tab and newline. Published as the prompt's pattern.
PROMPT_PATTERN = r"^[^\x00-\x08\x0b-\x1f]*[^\s\x00-\x1f][^\x00-\x08\x0b-\x1f]*$"

MIN_FRAMES, MAX_FRAMES, DEFAULT_FRAMES = 2, 32, 8
MIN_FPS, MAX_FPS, DEFAULT_FPS = 1, 60, 8
MIN_STEPS, MAX_STEPS = 1, 100
# A generative family's guidance scale (what it scales: the model's family table).
MAX_GUIDANCE = 20.0
MAX_SEED = 2**32 - 1

# Sides are multiples of SIDE_STEP. Up to FREE_ASPECT_SIDE any aspect ratio; above, one of
# ASPECT_RATIOS. The worker runs the model at a small working size and renders at this one.
MIN_SIDE, MAX_SIDE, SIDE_STEP = 32, 1024, 8
FREE_ASPECT_SIDE = 512
ASPECT_RATIOS = ((1, 1), (4, 5), (9, 16), (16, 9))  # width:height
# A request without width and height gets this long side and the image's aspect ratio.
DEFAULT_LONG_SIDE = 512

# An image field: a URL, a base64 data URI or the key of an object under inputs/.
IMAGE_PATTERN = r"^(data:|https?://|inputs/)"
MAX_IMAGE_FIELD_CHARS = 16 * 2**20

# ``variant`` and the parts of ``model`` (a deployment, or a pinned ``name@version``).
NAME = r"[a-z0-9][a-z0-9._-]{0,63}"
VARIANT_PATTERN = rf"^{NAME}$"
MODEL_PATTERN = rf"^{NAME}(@{NAME})?$"

# Motion add-ons: by name, each at most once, with a strength (1: as trained).
ADDON_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,31}$"
MAX_ADDONS = 3
MAX_SCALE = 2.0

# Motion-brush regions (see animfleet.brush for what each kind does).
MAX_REGIONS = 8
MAX_STROKE_POINTS = 64
MAX_SPEED = 64.0  # pixels per frame at the output size
MAX_AMPLITUDE = 128.0  # pixels at the output size
Kind = Literal["flow", "drift", "sway", "ripple", "pulse"]

MAX_WEBHOOK_CHARS = 2048
WebhookEvent = Literal["start", "progress", "completed"]
MAX_DEADLINE_S = 7 * 24 * 3600  # seconds from submission
MAX_METADATA_BYTES = 4096  # as serialised

# Fair share: who a job is billed to, and its urgency within that tenant (higher starts first).
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
DEFAULT_TENANT = "default"
MAX_PRIORITY, DEFAULT_PRIORITY = 9, 5

MAX_IDEMPOTENCY_KEY_CHARS = 255
MAX_BATCH_JOBS = 500
# The longest ``Prefer: wait=N`` a submit or a read waits for its job to end, in seconds.
MAX_PREFER_WAIT_S = 60

"""``serving.json`` in a model directory: how the model asks to be served.

Guidance is a property of the trained model (scales tuned for one model exaggerate another),
and a distilled student also fixes its step count, its passes per step and the guidance range
it was trained on; a worker reads these instead of guessing them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SERVING_FILE = "serving.json"


class GuidanceRange(BaseModel):
    """The (low, high) scales a guidance-distilled student was trained on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: tuple[float, float]
    text: tuple[float, float]

    def contains(self, image: float, text: float) -> bool:
        return self.image[0] <= image <= self.image[1] and self.text[0] <= text <= self.text[1]


class Serving(BaseModel):
    """The fields of ``serving.json``; an absent file means the defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image_guidance_scale: float = Field(default=1.5, ge=0)
    text_guidance_scale: float = Field(default=3.0, ge=0)
    steps: int | None = Field(default=None, ge=1, le=200)
    passes_per_step: int | None = Field(default=None, ge=1, le=3)
    guidance_range: GuidanceRange | None = None

    @model_validator(mode="after")
    def _scales_in_range(self) -> Serving:
        scales = (self.image_guidance_scale, self.text_guidance_scale)
        if self.guidance_range is not None and not self.guidance_range.contains(*scales):
            raise ValueError(f"guidance scales {scales} are outside {self.guidance_range}")
        return self


def load_serving(model_dir: Path) -> Serving:
    """The directory's serving settings; raises ValueError naming the file when it is invalid."""
    path = model_dir / SERVING_FILE
    if not path.is_file():
        return Serving()
    try:
        return Serving.model_validate_json(path.read_text())
    except ValidationError as error:
        raise ValueError(f"{path}: {error}") from error

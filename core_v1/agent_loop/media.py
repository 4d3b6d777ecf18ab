"""Images as the rows of verl's multimodal datasets hold them, read into PIL images."""

from __future__ import annotations

import io
from typing import Any

from core_v1.errors import UserError


class VisionDataError(UserError, ValueError):
    """A row's images or videos do not match its prompt's placeholders, or cannot be read."""


def load_image(image: Any) -> Any:
    """A PIL RGB image from a PIL image, a path, or a dict with `bytes` or `path`."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, dict):
        if image.get("bytes") is not None:
            return Image.open(io.BytesIO(image["bytes"])).convert("RGB")
        if image.get("image") is not None:
            return load_image(image["image"])
        if image.get("path"):
            return Image.open(str(image["path"]).removeprefix("file://")).convert("RGB")
    if isinstance(image, str):
        return Image.open(image.removeprefix("file://")).convert("RGB")
    raise VisionDataError(
        f"an image is a {type(image).__name__}; use a PIL image, a path, or a dict with "
        "'bytes' or 'path' (what datasets writes to parquet)"
    )

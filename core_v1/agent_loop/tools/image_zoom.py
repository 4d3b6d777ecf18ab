"""`ImageZoomInTool`: the model names a box on the row's image and is shown that region.

verl's DeepEyes recipe (v0.6-v0.7) names `verl.tools.image_zoom_in_tool.ImageZoomInTool`; this is
the same tool for the `tool_agent` loop (tool name `image_zoom_in_tool`, arguments `bbox_2d`
[left, top, right, bottom] in the image's pixels and an optional `label`), so that recipe's tool
config works once `class_name` names this class (the rename table and `python -m codemods.migrate`
write it). Per trajectory: `create` keeps the row's image (`tools_kwargs.image_zoom_in_tool.
create_kwargs.image`: a PIL image, a path, or a `{"bytes"|"path": ...}` dict). A call crops the box,
clamped to the image; a box narrower or shorter than 28 pixels (the smallest side a Qwen-VL image
processor keeps) is grown about its centre to 28, inside the image; a box that is empty, inverted
or more than 100 times longer than wide is refused. The crop comes back as an image in the tool
message (the policy must be a vision-language model), with a step reward of 0.0; a refusal is a
text message with a step reward of -0.05, as verl gives. The `config:` keys verl's recipe sets
for a worker pool (`num_workers`, `rate_limit`, `enable_global_rate_limit`, `timeout`) have no
effect (one log line says so): a crop takes milliseconds in the agent-loop worker, as in verl's tool;
`timeout_s` bounds a call as for every tool.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Optional
from uuid import uuid4

from core_v1.agent_loop.media import load_image
from core_v1.agent_loop.tools.base_tool import BaseTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["MIN_SIDE", "ImageZoomInTool", "zoom_box"]

logger = logging.getLogger(__name__)

MIN_SIDE = 28
POOL_KEYS = ("num_workers", "rate_limit", "enable_global_rate_limit", "timeout")
MAX_ASPECT = 100
FAILED_CALL_REWARD = -0.05


def zoom_box(box: list[float], width: int, height: int) -> Optional[tuple[int, int, int, int]]:
    """The pixel box to crop for `box` on a `width` x `height` image, or None when it cannot be shown."""
    left, top = max(0.0, float(box[0])), max(0.0, float(box[1]))
    right, bottom = min(float(width), float(box[2])), min(float(height), float(box[3]))
    if not _shown(right - left, bottom - top):
        return None
    if min(right - left, bottom - top) < MIN_SIDE:
        left, right = _grown(left, right, width)
        top, bottom = _grown(top, bottom, height)
    crop = (math.floor(left), math.floor(top), math.ceil(right), math.ceil(bottom))
    return crop if min(crop[2] - crop[0], crop[3] - crop[1]) >= MIN_SIDE else None


def _shown(width: float, height: float) -> bool:
    return width > 0 and height > 0 and max(width, height) / min(width, height) <= MAX_ASPECT


def _grown(low: float, high: float, limit: int) -> tuple[float, float]:
    """[low, high] widened about its centre to MIN_SIDE (no wider than `limit`), then shifted inside [0, limit]."""
    side = min(max(high - low, MIN_SIDE), limit)
    centre = (low + high) / 2
    low = min(max(centre - side / 2, 0.0), limit - side)
    return low, low + side


class ImageZoomInTool(BaseTool):
    """Crops a region of the trajectory's image and shows it to the model."""

    def __init__(self, config: Optional[dict] = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        super().__init__(config, tool_schema)
        self._images: dict[str, Any] = {}
        ignored = [key for key in POOL_KEYS if key in self.config]
        if ignored:
            logger.info("%s: config %s have no effect here (crops run in the worker's process)", self.name, ignored)

    def default_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "image_zoom_in_tool",
                    "description": "Show a region of the image, given its bounding box (and optionally what is in it)",
                    "parameters": {
                        "type": "object",
                        "required": ["bbox_2d"],
                        "properties": {
                            "bbox_2d": {
                                "type": "array",
                                "items": {"type": "number"},
                                "description": "The box as [left, top, right, bottom] in pixels of the image",
                            },
                            "label": {"type": "string", "description": "What is in the box (optional)"},
                        },
                    },
                },
            }
        )

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> str:
        instance_id = instance_id or uuid4().hex
        image = {**kwargs, **kwargs.get("create_kwargs", {})}.get("image")
        if image is None:
            raise ValueError(
                "the row gives no image to zoom into: set tools_kwargs.image_zoom_in_tool.create_kwargs.image"
            )
        self._images[instance_id] = load_image(image)
        return instance_id

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        box, label = parameters.get("bbox_2d"), parameters.get("label") or ""
        if not isinstance(box, list) or len(box) != 4 or not all(isinstance(v, (int, float)) for v in box):
            return ToolResponse(text="Error: bbox_2d must be a list of 4 numbers."), FAILED_CALL_REWARD, {"success": 0}
        image = self._images[instance_id]
        crop = zoom_box(box, *image.size)
        if crop is None:
            text = f"Error: the box {box} is empty, outside the image or too thin to show (at least {MIN_SIDE} pixels a side)."
            return ToolResponse(text=text), FAILED_CALL_REWARD, {"success": 0}
        text = f"Zoomed in on the region {box}" + (f" ({label})." if label else ".")
        return ToolResponse(text=text, image=[image.crop(crop)]), 0.0, {"success": 1}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._images.pop(instance_id, None)

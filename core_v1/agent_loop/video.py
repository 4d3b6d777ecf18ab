"""Videos in prompts: verl's `videos` column, as lists of frames -> a Qwen-VL model's video inputs.

A row's `data.video_key` column (default `videos`) holds one entry per `<video>` placeholder of its
prompt, in order, in the format verl's dataset hands to qwen-vl-utils: a dict whose `video` is a
list of frames (PIL images, `{"bytes": ...}` / `{"path": ...}` dicts, or paths), with optional
`fps` (the rate the frames were sampled at; 2.0 when absent, as qwen-vl-utils assumes for a frame
list), `min_pixels` / `max_pixels` or `resized_height` / `resized_width` (each frame's size). A
bare list of frames is an entry too. As in qwen-vl-utils, a frame list is taken whole (its
`nframes` / `min_frames` / `max_frames` only sample frames out of a decoded file).

A `video` that is a file (`.mp4`, ...) is refused: rlbridge uses no video decoder (PyAV, decord,
torchvision), so the file's frames are to be decoded beforehand.

The encoding is the one Qwen2-VL's video processor makes: every frame at one size (the entry's,
else the processor's image size limits), the frame count padded to a multiple of the temporal
patch with the last frame, each group of `temporal_patch_size` frames cut into patches of
`patch_size`^2 pixels in the spatial order of the image patches (merge blocks first), giving
`pixel_values_videos` [patches, channels * temporal_patch_size * patch_size^2] and
`video_grid_thw` [videos, 3]; Qwen2.5-VL adds `second_per_grid_ts` (temporal_patch_size / fps
per video), which its mRoPE positions read. The frames go through the processor's own image
processor, so they are resized and normalised as its images are. The prompt's video pad is
repeated to the video's token count (patches / merge_size^2) and its image pads to the images'.
Qwen3-VL's prompt instead gives each group of frames its own vision markers after its time,
`<1.2 seconds>`, as transformers' Qwen3-VL processor writes it: the mean time of the group's
first and last frame, frame i at i / fps (the last frame repeated to fill the last group).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Optional

import torch

from core_v1.agent_loop.media import VisionDataError, load_image

# The processors whose video prompts are built here.
_VIDEO_PROCESSORS = ("Qwen2VLProcessor", "Qwen2_5_VLProcessor", "Qwen3VLProcessor")
_DEFAULT_FPS = 2.0  # qwen-vl-utils' rate of a frame list that names none


class VideoDataError(VisionDataError):
    """A row's video entry is not a list of frames this module can read, or its model takes no videos."""


@dataclass(frozen=True)
class Video:
    """One video of a prompt: its frames (PIL RGB images) and how to size and time them."""

    frames: tuple
    fps: float = _DEFAULT_FPS
    min_pixels: Optional[int] = None  # each frame's area bounds; None: the processor's image limits
    max_pixels: Optional[int] = None
    resized: Optional[tuple[int, int]] = None  # (height, width) asked for, rounded to the patch grid

    def key(self) -> list:
        """What identifies the encoding (the frames by digest), for the prompt cache."""
        frames = [(f.mode, f.size, hashlib.sha1(f.tobytes()).hexdigest()) for f in self.frames]
        return [frames, self.fps, self.min_pixels, self.max_pixels, self.resized]


def row_videos(row: dict, video_key: str) -> list[Video]:
    """The row's videos (empty for a row without any)."""
    entries = row.get(video_key)
    if entries is None:
        return []
    return [_video(entry, video_key) for entry in list(entries)]


def _video(entry: Any, video_key: str) -> Video:
    options = dict(entry) if isinstance(entry, dict) else {"video": entry}
    frames = options.get("video")
    if isinstance(frames, (str, bytes, os.PathLike)):
        shown = os.fspath(frames) if not isinstance(frames, bytes) else f"{len(frames)} bytes"
        raise VideoDataError(
            f"a video under data.video_key={video_key!r} is a file ({shown!r}); rlbridge decodes no video "
            "files (that takes a decoder such as PyAV, decord or torchvision, which rlbridge does not use): "
            "decode it beforehand and store its frames, {'video': [frame images or image paths], 'fps': <their rate>}"
        )
    if frames is None or not len(frames):
        raise VideoDataError(
            f"a video under data.video_key={video_key!r} has no frames; give {{'video': [images], 'fps': ...}}"
        )
    resized = None
    if options.get("resized_height") and options.get("resized_width"):
        resized = (int(options["resized_height"]), int(options["resized_width"]))
    return Video(
        frames=tuple(load_image(frame) for frame in list(frames)),
        fps=float(options.get("fps") or _DEFAULT_FPS),
        min_pixels=_optional_int(options.get("min_pixels")),
        max_pixels=_optional_int(options.get("max_pixels")),
        resized=resized,
    )


def _optional_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


def encode_with_videos(
    processor: Any, text: str, images: list, videos: list[Video]
) -> tuple[list[int], dict[str, torch.Tensor]]:
    """(token ids, multimodal inputs) of a rendered prompt `text` holding one image pad per image
    and one video pad per video, as the Qwen2-VL processor would make them with a video processor."""
    family = next((cls.__name__ for cls in type(processor).__mro__ if cls.__name__ in _VIDEO_PROCESSORS), None)
    if family is None:
        raise VideoDataError(
            f"a prompt holds a video, and rlbridge builds video prompts for Qwen2-VL, Qwen2.5-VL and Qwen3-VL only "
            f"(this model's processor is a {type(processor).__name__}); drop data.video_key or use one of those"
        )
    inputs: dict[str, torch.Tensor] = {}
    merge = processor.image_processor.merge_size**2
    image_counts: list[int] = []
    if images:
        encoded = processor.image_processor(images=images, return_tensors="pt")
        inputs.update(pixel_values=encoded["pixel_values"], image_grid_thw=encoded["image_grid_thw"])
        image_counts = [int(grid.prod()) // merge for grid in encoded["image_grid_thw"]]
    encoded_videos = [video_patches(processor.image_processor, video) for video in videos]
    inputs["pixel_values_videos"] = torch.cat([pixels for pixels, _ in encoded_videos])
    inputs["video_grid_thw"] = torch.stack([grid for _, grid in encoded_videos])
    if family == "Qwen2_5_VLProcessor":
        patch = processor.image_processor.temporal_patch_size
        inputs["second_per_grid_ts"] = torch.tensor([patch / video.fps for video in videos])
    text = _expand(text, processor.image_token, image_counts, "image")
    if family == "Qwen3VLProcessor":
        text = _timed_frames(processor, text, videos, [grid for _, grid in encoded_videos])
    else:
        text = _expand(text, processor.video_token, [int(grid.prod()) // merge for _, grid in encoded_videos], "video")
    return list(processor.tokenizer([text])["input_ids"][0]), inputs


def video_patches(image_processor: Any, video: Video) -> tuple[torch.Tensor, torch.Tensor]:
    """(`pixel_values_videos` [patches, dim], `video_grid_thw` [3]) of one video."""
    frames, size = _sized_frames(image_processor, video)
    encoded = image_processor(images=list(frames), return_tensors="pt", **size)
    grids = encoded["image_grid_thw"]
    if not bool((grids == grids[0]).all()):
        raise VideoDataError(
            "the frames of a video come out at different sizes; give frames of one size, or "
            "resized_height / resized_width in the video's entry"
        )
    temporal, patch = image_processor.temporal_patch_size, image_processor.patch_size
    channels = encoded["pixel_values"].shape[-1] // (temporal * patch * patch)
    per_frame = int(grids[0].prod())
    # An image's patch repeats its one frame over the temporal axis; a video's holds consecutive frames there.
    pixels = encoded["pixel_values"].view(len(frames), per_frame, channels, temporal, patch, patch)[:, :, :, 0]
    if pad := -len(frames) % temporal:
        pixels = torch.cat([pixels, pixels[-1:].expand(pad, -1, -1, -1, -1)])
    groups = pixels.shape[0] // temporal
    pixels = pixels.view(groups, temporal, per_frame, channels, patch, patch).permute(0, 2, 3, 1, 4, 5)
    grid = torch.tensor([groups, int(grids[0][1]), int(grids[0][2])])
    return pixels.reshape(groups * per_frame, channels * temporal * patch * patch), grid


def _sized_frames(image_processor: Any, video: Video) -> tuple[tuple, dict]:
    """The frames and the image processor's size arguments that give each frame the entry's size."""
    factor = image_processor.patch_size * image_processor.merge_size
    if video.resized is not None:
        from PIL import Image

        height, width = (max(factor, round(side / factor) * factor) for side in video.resized)
        return tuple(frame.resize((width, height), Image.Resampling.BICUBIC) for frame in video.frames), {
            "do_resize": False
        }
    if video.min_pixels is None and video.max_pixels is None:
        return video.frames, {}
    limits = dict(image_processor.size)
    if video.min_pixels is not None:
        limits["shortest_edge"] = video.min_pixels
    if video.max_pixels is not None:
        limits["longest_edge"] = video.max_pixels
    return video.frames, {"size": limits}


def _expand(text: str, token: str, counts: list[int], kind: str, replacements: Optional[list[str]] = None) -> str:
    """`text` with its i-th `token` repeated `counts[i]` times (or replaced by `replacements[i]`)."""
    pieces = text.split(token)
    if len(pieces) - 1 != len(counts):
        raise VideoDataError(
            f"the rendered prompt holds {len(pieces) - 1} {kind} pads for {len(counts)} {kind}s; the chat "
            f"template must render one {token} per {kind} part"
        )
    replacements = replacements or [token * count for count in counts]
    return pieces[0] + "".join(new + piece for new, piece in zip(replacements, pieces[1:]))


def _timed_frames(processor: Any, text: str, videos: list[Video], grids: list[torch.Tensor]) -> str:
    """Qwen3-VL's video prompt: the template's `<vision_start><video_pad><vision_end>` of each video
    becomes, per frame group, its time and its own markers around its pads."""
    start, end, pad = processor.vision_start_token, processor.vision_end_token, processor.video_token
    per_group = [int(grid[1:].prod()) // processor.image_processor.merge_size**2 for grid in grids]
    groups = [
        "".join(f"<{time:.1f} seconds>{start}{pad * count}{end}" for time in _group_times(video, processor))
        for video, count in zip(videos, per_group)
    ]
    return _expand(text, start + pad + end, [0] * len(videos), "video", replacements=groups)


def _group_times(video: Video, processor: Any) -> list[float]:
    """Seconds of each temporal group: the mean of its first and last frame's time (frame i at i / fps)."""
    temporal = processor.image_processor.temporal_patch_size
    frames = list(range(len(video.frames)))
    frames += frames[-1:] * (-len(frames) % temporal)
    return [(frames[i] + frames[i + temporal - 1]) / 2 / video.fps for i in range(0, len(frames), temporal)]

"""Custom prompt samplers with verl's API (`data.sampler.{class_path,class_name}`), curriculum included.

A sampler is a `torch.utils.data.Sampler` of dataset indices built as
`cls(data_source=dataset, data_config=<the data section>)` (a read-only `DictConfig`, as verl
hands it over); it subclasses `AbstractSampler`, or `AbstractCurriculumSampler` to be told after
every training step what the step trained on (`update(batch=...)`), so it can reorder what comes
next. These are verl's names and signatures, so verl's samplers run unchanged, on V1 and on V0.

`CustomSamplerFeed` turns such a sampler into the prompt feed the trainers draw from: batches of
`batch_size` rows, the ragged tail of an epoch dropped (as verl's dataloader does), a fresh pass
of the sampler each epoch. Its state is checkpointed: the epoch, the position in the pass, the
sampler's own `state_dict()` when it has one, and the pass iterator's when that has one (then a
resumed pass continues from it, as torchdata's stateful dataloader does; otherwise the resumed
pass skips the indices already drawn).

What `update` gets: on V0 the step's `DataProto`; on V1 a `StepBatch` (`step_batch`), the same
three attributes: `batch` (the step's tensors: `responses`, `response_mask`,
`token_level_scores`, `token_level_rewards`, `advantages`, ...), `non_tensor_batch` (each per-row
Python column as a numpy object array: `uid`, `data_source`, `extra_info`, `reward_model`, ...)
and `meta_info` (`global_steps`). A sampler that wants `DataProto`'s methods builds one from
those three (`legacy_v0.protocol.DataProto(batch=..., non_tensor_batch=..., meta_info=...)`).

`class_path` is a `.py` file (`file://` prefix allowed) or a module (`pkg://a.b` or `a.b`).
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
from omegaconf import OmegaConf
from tensordict import TensorDict, is_non_tensor
from torch.utils.data import Sampler

from core_v1.config import ConfigError
from core_v1.data.dataset import DataError, PromptDataset


class AbstractSampler(Sampler[int]):
    """verl's interface for a custom sampler: yields dataset indices."""

    @abstractmethod
    def __init__(self, data_source: Sized, data_config: Any):
        pass


class AbstractCurriculumSampler(AbstractSampler):
    """A sampler told about every finished training step (`update(batch)`), to adapt the order."""

    @abstractmethod
    def update(self, batch: Any) -> None:
        pass


SAMPLER_KEY = "data.sampler"


def load_sampler_class(class_path: str, class_name: str) -> type[AbstractSampler]:
    """The sampler class `data.sampler.{class_path,class_name}` names; ConfigError when it is missing
    or is not an `AbstractSampler` (verl's `verl.experimental.dataset.sampler` classes count too)."""
    from core_v1.utils.loading import PluginError, load_verl_object

    file = Path(str(class_path).removeprefix("file://"))
    if file.suffix == ".py" and not file.expanduser().is_file():
        raise ConfigError(f"{SAMPLER_KEY}.class_path={class_path!r} does not exist")
    try:
        cls = load_verl_object(class_path, class_name, key=f"{SAMPLER_KEY}.class_path/class_name")
    except PluginError as error:
        raise ConfigError(str(error)) from None
    if not (isinstance(cls, type) and _is_sampler_class(cls)):
        raise ConfigError(
            f"{SAMPLER_KEY}.class_name={class_name!r} in {class_path} is not a sampler: subclass "
            "core_v1.data.samplers.AbstractSampler (or AbstractCurriculumSampler)"
        )
    return cls


def _is_sampler_class(cls: type) -> bool:
    """An rlbridge sampler, or one written against verl's classes of the same names."""
    return issubclass(cls, AbstractSampler) or any(
        base.__name__ in ("AbstractSampler", "AbstractCurriculumSampler") for base in cls.__mro__
    )


def is_curriculum(sampler: Any) -> bool:
    return callable(getattr(sampler, "update", None)) and (
        isinstance(sampler, AbstractCurriculumSampler)
        or any(base.__name__ == "AbstractCurriculumSampler" for base in type(sampler).__mro__)
    )


@dataclass
class StepBatch:
    """A finished training step as a curriculum sampler reads it: `DataProto`'s three attributes."""

    batch: TensorDict  # the step's tensors, one row per trajectory (padded as the trainer pads them)
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)  # column -> object array, one per row
    meta_info: dict = field(default_factory=dict)  # `global_steps`: the step that trained on these rows

    def __len__(self) -> int:
        return int(self.batch.batch_size[0])


def step_batch(batch: TensorDict, **meta_info: Any) -> StepBatch:
    """The view of a V1 training batch: tensors stay a TensorDict, each non-tensor column becomes
    an object array (one Python object per row, as verl's `non_tensor_batch` holds them)."""
    columns = [key for key in batch.keys() if is_non_tensor(batch.get(key))]
    non_tensor = {}
    for key in columns:
        values = batch.get(key).tolist()
        array = np.empty(len(values), dtype=object)
        array[:] = values  # element-wise: dicts and lists stay whole objects
        non_tensor[key] = array
    return StepBatch(batch=batch.exclude(*columns), non_tensor_batch=non_tensor, meta_info=dict(meta_info))


class CustomSamplerFeed:
    """Batches of dataset rows in the order a custom sampler gives (the `PromptSampler` interface)."""

    def __init__(self, sampler: Sampler, dataset: PromptDataset, batch_size: int):
        if batch_size > len(dataset):
            raise DataError(
                f"batch size {batch_size} is larger than the dataset ({len(dataset)} rows); "
                "lower data.train_batch_size or add data"
            )
        self.sampler, self.dataset, self.batch_size = sampler, dataset, batch_size
        self.epoch, self.position = 0, 0
        self._pass: Optional[Iterator[int]] = None
        self._pass_state: Any = None  # a stateful pass iterator's state, restored on its first draw

    @property
    def batches_per_epoch(self) -> int:
        return _sampler_length(self.sampler, self.dataset) // self.batch_size

    def next_batch(self) -> list[dict]:
        indices = self._take(self.batch_size)
        if len(indices) < self.batch_size:  # the ragged tail of a pass is dropped: a new epoch
            self.epoch, self.position, self._pass = self.epoch + 1, 0, None
            indices = self._take(self.batch_size)
            if len(indices) < self.batch_size:
                raise DataError(
                    f"the custom sampler ({type(self.sampler).__name__}) yielded {len(indices)} indices "
                    f"in a whole pass, fewer than data.train_batch_size={self.batch_size}"
                )
        self.position += len(indices)
        return [dict(self.dataset[int(i)]) for i in indices]

    @property
    def curriculum(self) -> bool:
        """Whether the sampler wants each finished step's batch (`update`)."""
        return is_curriculum(self.sampler)

    def update(self, batch: Any) -> None:
        """Tell a curriculum sampler what the finished step trained on (no-op for other samplers)."""
        if self.curriculum:
            self.sampler.update(batch=batch)

    def _take(self, count: int) -> list[int]:
        if self._pass is None:
            self._pass = iter(self.sampler)
            pass_state, self._pass_state = self._pass_state, None
            if pass_state is not None and _stateful(self._pass):
                self._pass.load_state_dict(pass_state)
            else:
                for _ in range(self.position):  # resuming inside a pass: skip what was already drawn
                    next(self._pass, None)
        taken = []
        for index in self._pass:
            taken.append(index)
            if len(taken) == count:
                break
        return taken

    def state_dict(self) -> dict:
        state = {"epoch": self.epoch, "position": self.position}
        if _stateful(self.sampler):
            state["sampler"] = self.sampler.state_dict()
        if self._pass is not None and _stateful(self._pass):
            state["pass"] = self._pass.state_dict()
        elif self._pass is None and self._pass_state is not None:  # restored, not drawn from yet
            state["pass"] = self._pass_state
        return state

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position, self._pass = int(state["epoch"]), int(state["position"]), None
        self._pass_state = state.get("pass")
        if "sampler" in state and _stateful(self.sampler):
            self.sampler.load_state_dict(state["sampler"])


def _stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _sampler_length(sampler: Sampler, dataset: PromptDataset) -> int:
    try:
        return len(sampler)
    except TypeError:  # a sampler without __len__ walks the dataset once per epoch
        return len(dataset)


def build_custom_sampler_feed(
    class_path: Optional[str], class_name: Optional[str], dataset: PromptDataset, data_config: Any, batch_size: int
) -> Optional[CustomSamplerFeed]:
    """The feed for `data.sampler`, or None when no custom sampler is configured."""
    if not class_path:
        return None
    cls = load_sampler_class(class_path, class_name)
    try:
        sampler = cls(data_source=dataset, data_config=_as_dictconfig(data_config))
    except Exception as error:  # noqa: BLE001 - the user's constructor: one line naming it
        raise ConfigError(
            f"building the sampler {class_name} ({SAMPLER_KEY}) failed: {type(error).__name__}: {error}"
        ) from None
    return CustomSamplerFeed(sampler, dataset, batch_size)


def _as_dictconfig(data_config: Any) -> Any:
    """The typed data section as the read-only `DictConfig` verl hands its samplers (`.get(key,
    default)` works); read-only, because the run has read its config already."""
    if not (dataclasses.is_dataclass(data_config) and not isinstance(data_config, type)):
        return data_config
    view = OmegaConf.structured(data_config)
    OmegaConf.set_readonly(view, True)
    return view


__all__ = [
    "AbstractSampler",
    "AbstractCurriculumSampler",
    "CustomSamplerFeed",
    "StepBatch",
    "build_custom_sampler_feed",
    "load_sampler_class",
    "is_curriculum",
    "step_batch",
]

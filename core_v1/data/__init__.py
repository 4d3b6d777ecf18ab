from core_v1.data.dataset import DataError, PromptDataset, PromptSampler, build_dataset

__all__ = ["DataError", "PromptDataset", "PromptSampler", "build_dataset"]

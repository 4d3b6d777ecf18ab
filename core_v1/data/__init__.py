from core_v1.data.dataset import DataError, PromptDataset, PromptSampler

__all__ = ["DataError", "PromptDataset", "PromptSampler"]

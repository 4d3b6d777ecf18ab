"""PF-PPO (policy filtration, arXiv 2409.06957): train on a batch resampled by reward.

After the advantages are computed, every row gets a weight from its sequence score (the sum of
`token_level_scores`), and the batch is replaced by `B` rows drawn with replacement in proportion
to those weights, so the update leans on the rows whose reward is most trustworthy. The weights
(verl's `algorithm.pf_ppo.reweight_method`):

- `pow`: `|score| ** weight_pow` (rows with large-magnitude rewards, good or bad, dominate);
- `max_min`: 1 for rows holding the batch's highest or lowest score, 0 for the rest;
- `max_random`: 0.4 for rows holding the highest score, 0.1 for the rest.

As in verl, `1e-8` is added to every weight, so a batch of all-zero weights samples uniformly.
Unlike verl, which draws from torch's global RNG, the draw takes an explicit `torch.Generator`:
the trainers seed one from `(trainer.seed, step)`, so V0 and V1 (and a resumed run) pick the same
rows. verl applies PF-PPO only in its GAE branch; here it follows any advantage estimator, so the
key is never accepted and then ignored.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.errors import AlgorithmConfigError
from core_v1.utils.seeding import derive_seed

REWEIGHT_METHODS = ("pow", "max_min", "max_random")


@torch.no_grad()
def pf_ppo_weights(scores: torch.Tensor, reweight_method: str = "pow", weight_pow: float = 2.0) -> torch.Tensor:
    """Sampling weights [B] for sequence scores [B] (see the module docstring), before the 1e-8 floor."""
    scores = scores.float()
    if reweight_method == "pow":
        return scores.abs().pow(weight_pow)
    if reweight_method == "max_min":
        extreme = (scores == scores.max()) | (scores == scores.min())
        return extreme.float()
    if reweight_method == "max_random":
        return torch.where(scores == scores.max(), 0.4, 0.1)
    raise AlgorithmConfigError(
        f"algorithm.pf_ppo.reweight_method={reweight_method!r} is not one of {', '.join(REWEIGHT_METHODS)}"
    )


@torch.no_grad()
def pf_ppo_resample_indices(
    token_level_scores: torch.Tensor,
    reweight_method: str = "pow",
    weight_pow: float = 2.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Row indices [B] drawn with replacement in proportion to the PF-PPO weights of each row's
    summed `token_level_scores` [B, R]; index the batch with them to get the filtered batch."""
    weights = pf_ppo_weights(token_level_scores.sum(dim=-1), reweight_method, weight_pow)
    weights = (weights + 1e-8).clamp(min=1e-8)
    return torch.multinomial(weights.cpu(), len(weights), replacement=True, generator=generator)


def pf_ppo_generator(seed: int, step: int) -> torch.Generator:
    """The generator both trainers draw step `step`'s rows from (independent of any other RNG use)."""
    return torch.Generator().manual_seed(derive_seed("pf_ppo", seed, step))


def pf_ppo_metrics(indices: torch.Tensor) -> dict[str, float]:
    """How much the resampling concentrated the batch: the share of distinct rows kept."""
    return {"pf_ppo/unique_row_fraction": torch.unique(indices).numel() / max(1, indices.numel())}

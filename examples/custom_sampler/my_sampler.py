# my_sampler.py — the seed note's custom replay buffer, with only its import line changed.
from core_v1.trainer.replay_buffer import ReplayBuffer


class MyReplayBuffer(ReplayBuffer):
    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        return batch, metrics

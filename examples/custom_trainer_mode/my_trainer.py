# my_trainer.py — the seed note's custom trainer mode, with only its import line changed.
from core_v1.trainer import PPOTrainer, register_trainer


@register_trainer("my_mode")
class MyTrainer(PPOTrainer):
    def on_sample_end(self):
        self.checkpoint_manager.sleep_replicas()

    def on_step_end(self):
        if self.global_steps % 2 == 0:
            self.checkpoint_manager.update_weights(self.global_steps)

"""The V0 workers: `ActorRolloutRefWorker` and `CriticWorker`, taking and returning `DataProto`.

They keep verl's method names (`init_model`, `generate_sequences`, `compute_log_prob`,
`compute_ref_log_prob`, `update_actor`, `compute_values`, `update_critic`, `save_checkpoint`,
`load_checkpoint`) so that user subclasses of them keep working, and they are thin: every
forward pass, loss and optimizer step is `core_v1.workers`' (`ActorEngine`, `ReferenceEngine`,
`CriticEngine`), and generation is `core_v1.rollout`'s in-process `LLMServer`. V0 and V1 run the
same code on the same numbers; only the container differs (a padded `DataProto` here, stages
over a TensorDict there).

The actor-rollout worker is a hybrid engine, as in verl: the policy being trained and a rollout
replica live in one worker, and `update_actor` / `load_checkpoint` push the new weights into the
replica (V1's `naive` checkpoint engine: a colocated copy) before returning.

Generation seeds every request from (run seed, `uid`, `session_id`) exactly as V1's agent-loop
manager does, so a sample's tokens depend on what it is, never on how requests were batched,
and V0 draws the same samples as V1 `sync` for the same prompts.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Optional, Sequence

import torch
from tensordict import TensorDict

from core_v1.agent_loop.manager import sampling_params_for
from core_v1.checkpoint_engine import NaiveCheckpointEngine
from core_v1.config.schema import PPOConfig
from core_v1.rollout import LLMServer, LLMServerClient, TokenOutput
from core_v1.trainer.setup import resolve_device
from core_v1.utils.seeding import derive_seed
from core_v1.workers import ActorEngine, CriticEngine, ReferenceEngine
from core_v1.workers.lora import starts_from_adapter
from legacy_v0 import warn_deprecated
from legacy_v0.config.class_paths import RunInPlace, load_checkpoint_manager_class
from legacy_v0.protocol import DataProto, object_column

warn_deprecated(stacklevel=3)

ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")
GENERATED_COLUMNS = ("num_turns", "min_global_steps", "max_global_steps")  # non-tensor outputs of generate_sequences


class WorkerStateError(RuntimeError):
    """A worker method was called before `init_model()`, or on a role that does not hold that part."""


def request_seed(run_seed: int, uid: str, session_id: int) -> int:
    """The sampling seed of one single-turn request, derived as V1 derives it.

    V1's `AgentLoopManager.submit` gives session `s` of group `uid` the seed
    `derive_seed(run_seed, uid, s)`, and the agent-loop worker's recording client seeds the
    session's `k`-th generate call with `derive_seed(session_seed, k)`; a single-turn sample
    makes one call, `k = 0`.
    """
    return derive_seed(derive_seed(run_seed, uid, int(session_id)), 0)


def left_pad(rows: Sequence[Sequence[int]], pad_value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`[B, longest]` left-padded ids and their attention mask (the contract's prompt layout)."""
    return _pad([torch.as_tensor(list(r), dtype=torch.long) for r in rows], pad_value, "left")


def right_pad(rows: Sequence[Sequence[float]], pad_value: float,
              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`[B, longest]` right-padded values and their mask (the contract's response layout)."""
    return _pad([torch.as_tensor(list(r), dtype=dtype) for r in rows], pad_value, "right")


def _pad(rows: list[torch.Tensor], pad_value: float, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    padded = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=pad_value, padding_side=side)
    ones = [torch.ones(len(r), dtype=torch.long) for r in rows]
    mask = torch.nn.utils.rnn.pad_sequence(ones, batch_first=True, padding_value=0, padding_side=side)
    return padded, mask


def load_tokenizer(config: PPOConfig) -> Any:
    """The run's tokenizer, from the path V1 uses (`model.tokenizer_path`, `data.tokenizer`, the model)."""
    from core_v1.agent_loop.base import load_policy_tokenizer

    return load_policy_tokenizer(config)  # with model.custom_chat_template, as V1's


def pad_token_id(tokenizer: Any) -> int:
    """The id padding is filled with: the tokenizer's pad token, else its EOS, else 0 (as V1 pads)."""
    for candidate in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if candidate is not None:
            return int(candidate)
    return 0


def _engine_batch(data: DataProto) -> TensorDict:
    if data.batch is None:
        raise WorkerStateError("this DataProto has no tensors; the workers need the padded batch of "
                               "docs/CONTRACTS.md (input_ids, attention_mask, position_ids, responses, ...)")
    return data.batch


class ActorRolloutRefWorker:
    """The policy (training), its rollout replica (generation) and/or the reference policy.

    Args:
        config: the run's typed `PPOConfig` (`actor_rollout_ref.*`, `algorithm.rollout_correction`,
            `trainer.seed`, `trainer.device` are read).
        role: which parts this worker holds, as in verl: `actor`, `rollout`, `ref`,
            `actor_rollout` (the usual hybrid engine) or `actor_rollout_ref`.
    """

    # How V1 runs a subclass named in `trainer.v1.worker_class` (a name, so neither layer imports the other).
    v1_worker_adapter = "shims.worker:v0_worker_roles"

    def __init__(self, config: PPOConfig, role: str = "actor_rollout"):
        if role not in ROLES:
            raise ValueError(f"ActorRolloutRefWorker role {role!r} is not one of {', '.join(ROLES)}")
        self.config = config
        self.role = role
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        self.device = resolve_device(config)
        self.actor: Optional[ActorEngine] = None
        self.ref: Optional[ReferenceEngine] = None
        self.rollout: Optional[LLMServerClient] = None
        self._server: Optional[LLMServer] = None
        self.tokenizer = None
        self._weight_sync = None
        self._checkpoint_manager = None
        self._weight_version = 0

    @property
    def pad_token_id(self) -> int:
        return pad_token_id(self.tokenizer)

    @property
    def weight_version(self) -> int:
        """The version of the weights the rollout replica holds (one more after each `update_actor`)."""
        return self._weight_version

    # ------------------------------------------------------------------------------ lifecycle
    def init_model(self) -> None:
        """Load the parts this role holds: the actor (with its optimizer), the reference, the replica."""
        aro = self.config.actor_rollout_ref
        if self._is_actor:
            self.actor = ActorEngine(self.config, device=self.device)
        if self._is_ref:
            self.ref = ReferenceEngine(self.config, device=self.device, actor=self.actor)  # a LoRA actor's base
        if self._is_rollout:
            self.tokenizer = load_tokenizer(self.config)
            # V1 loads its replicas in other processes: loading this one must not move the
            # training RNG stream (the critic's fresh value head draws from it next).
            with torch.random.fork_rng(devices=[]):
                self._server = LLMServer.from_model(aro.model.path, engine=aro.rollout.name, device=self.device,
                                                    **dict(aro.rollout.engine_kwargs))
            self.rollout = LLMServerClient([self._server])
            # The replica lives in this process: the colocated `naive` copy is the right backend
            # whatever `checkpoint_engine.backend` says (that key chooses V1's cross-process sync).
            self._weight_sync = NaiveCheckpointEngine(aro.rollout.checkpoint_engine)
            manager_cls = load_checkpoint_manager_class(aro.rollout.checkpoint_manager_class)
            if manager_cls is not None:  # verl's custom checkpoint manager: it does every sync
                self._checkpoint_manager = manager_cls(self.actor, self.rollout, self._weight_sync, RunInPlace())
            if starts_from_adapter(aro.model):  # the replica loaded the base model; the policy has the adapter
                self._sync_rollout_weights()

    def set_total_training_steps(self, total_training_steps: int) -> None:
        """How many updates the actor's LR schedule spans (the trainer calls it after `init_model`)."""
        if self.actor is not None:
            self.actor.set_total_training_steps(total_training_steps)

    def shutdown(self) -> None:
        if self._weight_sync is not None:
            self._weight_sync.close()
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    # ----------------------------------------------------------------------------- generation
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate one response per row of `prompts`; return the rows' padded training layout.

        Input: `raw_prompt_ids` (per-row token lists; else `input_ids` unpadded by
        `attention_mask`), and `uid` + `session_id` to seed each row as V1 does (rows without
        them are sampled unseeded). `meta_info`: `validate=True` samples with
        `rollout.val_kwargs`, `do_sample=False` decodes greedily.

        Output batch (docs/CONTRACTS.md, padded to the longest prompt and response of the batch):
        `prompts`, `responses`, `input_ids`, `attention_mask`, `position_ids`, `response_mask`,
        `rollout_log_probs`; non-tensor `num_turns` (2: one prompt, one answer) and
        `min_global_steps` / `max_global_steps` (the replica's weight versions that produced each
        sample); `meta_info` is the input's.
        """
        self._require(self.rollout, "generate_sequences", "rollout")
        prompt_ids = self._prompt_ids(prompts)
        params = self._sampling_params(prompts.meta_info)
        seeds = self._seeds(prompts)
        outputs = asyncio.run(self._generate_all(prompt_ids, params, seeds))
        return self._to_training_layout(prompt_ids, outputs, prompts.meta_info)

    def _prompt_ids(self, prompts: DataProto) -> list[list[int]]:
        if "raw_prompt_ids" in prompts.non_tensor_batch:
            return [[int(t) for t in ids] for ids in prompts.non_tensor_batch["raw_prompt_ids"]]
        batch = _engine_batch(prompts)
        return [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]

    def _sampling_params(self, meta_info: dict) -> dict:
        params = sampling_params_for(self.config, validate=bool(meta_info.get("validate", False)))
        if meta_info.get("do_sample") is False:
            params["temperature"] = 0.0
        return params

    def _seeds(self, prompts: DataProto) -> list[Optional[int]]:
        columns = prompts.non_tensor_batch
        if "uid" not in columns or "session_id" not in columns:
            return [None] * len(prompts)
        run_seed = self.config.trainer.seed
        return [request_seed(run_seed, uid, session) for uid, session in zip(columns["uid"], columns["session_id"])]

    async def _generate_all(self, prompt_ids: list[list[int]], params: dict,
                            seeds: list[Optional[int]]) -> list[TokenOutput]:
        await self.rollout.wake_up()
        try:
            return list(await asyncio.gather(*(
                self.rollout.generate(uuid.uuid4().hex, ids, {**params, "seed": seed})
                for ids, seed in zip(prompt_ids, seeds))))
        finally:
            await self.rollout.sleep()  # the memory goes back to training until the next batch

    def _to_training_layout(self, prompt_ids: list[list[int]], outputs: list[TokenOutput],
                            meta_info: dict) -> DataProto:
        limit = self.config.actor_rollout_ref.rollout.response_length
        response_ids = [list(o.token_ids)[:limit] for o in outputs]
        # A request that asked for no log-probs returns none; its padded row is zeros, as in V1.
        response_log_probs = [list(o.log_probs)[:limit] or [0.0] * len(ids) for o, ids in zip(outputs, response_ids)]
        prompts, prompt_mask = left_pad(prompt_ids, self.pad_token_id)
        responses, response_attention = right_pad(response_ids, self.pad_token_id, torch.long)
        log_probs, _ = right_pad(response_log_probs, 0.0, torch.float32)
        attention_mask = torch.cat([prompt_mask, response_attention], dim=1)
        tensors = {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
            "response_mask": response_attention.clone(),
            "rollout_log_probs": log_probs,
        }
        # One user turn and one assistant turn per sample, counted as V1's single-turn loop counts them;
        # the weight versions that produced each sample, under the names of V1's row tags (staleness).
        columns = dict(zip(GENERATED_COLUMNS, (object_column([2] * len(response_ids)),
                                                object_column([o.min_weight_version for o in outputs]),
                                                object_column([o.max_weight_version for o in outputs]))))
        return DataProto.from_dict(tensors=tensors, non_tensors=columns, meta_info=dict(meta_info))

    # ------------------------------------------------------------------------------ log-probs
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """`old_log_probs` and `entropys` [B, R] of the responses under the current policy."""
        self._require(self.actor, "compute_log_prob", "actor")
        log_probs, entropys = self.actor.compute_log_prob(_engine_batch(data), calculate_entropy=True)
        tensors = {"old_log_probs": log_probs}
        if entropys is not None:
            tensors["entropys"] = entropys
        return DataProto.from_dict(tensors=tensors, meta_info={"temperature": self.actor.temperature})

    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """`ref_log_prob` [B, R] of the responses under the frozen reference policy."""
        self._require(self.ref, "compute_ref_log_prob", "ref")
        return DataProto.from_dict(tensors={"ref_log_prob": self.ref.compute_ref_log_prob(_engine_batch(data))})

    # ------------------------------------------------------------------------------- training
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO update on `data`, then the rollout replica gets the new weights.

        Returns a DataProto whose `meta_info["metrics"]` holds the `actor/*` metrics and the
        weight-sync metrics.
        """
        self._require(self.actor, "update_actor", "actor")
        metrics = dict(self.actor.update_policy(_engine_batch(data)))
        self._weight_version += 1
        metrics.update(self._sync_rollout_weights())
        return DataProto(meta_info={"metrics": metrics})

    def _sync_rollout_weights(self) -> dict:
        """Push the actor's weights into this worker's replica (the hybrid engine's weight sync)."""
        if self.rollout is None or self.actor is None:
            return {}
        if self._checkpoint_manager is not None:
            return self._checkpoint_manager.update_weights(self._weight_version)
        return asyncio.run(self._weight_sync.sync(self.actor.named_parameters_for_sync(), self.rollout,
                                                  self._weight_version))

    # ---------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self, local_path: str, hdfs_path: Optional[str] = None, global_step: int = 0,
                        max_ckpt_to_keep: Optional[int] = None) -> None:
        """Write the actor (model, optimizer, schedule and RNG state) to `local_path`.

        `hdfs_path` and `max_ckpt_to_keep` are verl's; copying to HDFS is not supported and
        pruning old checkpoints is the trainer's job (`trainer.max_actor_ckpt_to_keep`).
        """
        self._require(self.actor, "save_checkpoint", "actor")
        if hdfs_path:
            raise WorkerStateError("save_checkpoint(hdfs_path=...) is not supported; copy "
                                   "trainer.default_local_dir yourself (unset trainer.default_hdfs_dir)")
        self.actor.save_checkpoint(local_path)

    def load_checkpoint(self, local_path: str, hdfs_path: Optional[str] = None,
                        del_local_after_load: bool = False, global_step: Optional[int] = None) -> None:
        """Restore the actor from `local_path` and bring the rollout replica to the restored weights."""
        self._require(self.actor, "load_checkpoint", "actor")
        self.actor.load_checkpoint(local_path)
        if global_step is not None:
            self._weight_version = int(global_step)
        self._sync_rollout_weights()

    def _require(self, part: Any, method: str, needed: str) -> None:
        if part is None:
            built = "init_model() has not run" if self.actor is self.ref is self.rollout is None else \
                f"role {self.role!r} holds no {needed}"
            raise WorkerStateError(f"{type(self).__name__}.{method}: {built}; construct the worker with a role "
                                   f"that includes {needed!r} and call init_model() first")


class CriticWorker:
    """The value model: `compute_values` and `update_critic` over `DataProto`, on `CriticEngine`."""

    def __init__(self, config: PPOConfig):
        self.config = config
        self.device = resolve_device(config)
        self.critic: Optional[CriticEngine] = None

    def init_model(self) -> None:
        self.critic = CriticEngine(self.config, device=self.device)

    def set_total_training_steps(self, total_training_steps: int) -> None:
        self._engine("set_total_training_steps").set_total_training_steps(total_training_steps)

    def compute_values(self, data: DataProto) -> DataProto:
        """`values` [B, R] of the response tokens (zero where `response_mask` is 0)."""
        values = self._engine("compute_values").compute_values(_engine_batch(data))
        return DataProto.from_dict(tensors={"values": values})

    def update_critic(self, data: DataProto) -> DataProto:
        """One critic update towards `returns`; `meta_info["metrics"]` holds the `critic/*` metrics."""
        metrics = self._engine("update_critic").update_critic(_engine_batch(data))
        return DataProto(meta_info={"metrics": dict(metrics)})

    def save_checkpoint(self, local_path: str, hdfs_path: Optional[str] = None, global_step: int = 0,
                        max_ckpt_to_keep: Optional[int] = None) -> None:
        self._engine("save_checkpoint").save_checkpoint(local_path)

    def load_checkpoint(self, local_path: str, hdfs_path: Optional[str] = None,
                        del_local_after_load: bool = False) -> None:
        self._engine("load_checkpoint").load_checkpoint(local_path)

    def shutdown(self) -> None:
        """Nothing to release; present so the trainer can close every worker alike."""

    def _engine(self, method: str) -> CriticEngine:
        if self.critic is None:
            raise WorkerStateError(f"CriticWorker.{method}: call init_model() first")
        return self.critic



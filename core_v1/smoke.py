"""A smoke run (`trainer.smoke=true`): the user's own run, two steps on the CPU, before a long one.

`smoke_config(raw, workdir)` rewrites a composed config (V1 layout; the V0 entry hands over the
one its trainer reads) into its smoke form and returns one `Replacement` per thing it changed,
each with the reason. What stays is the point of the run: the user's reward function, agent loops
and their YAML, tools, custom sampler, trainer mode, plug-ins, estimator, losses, worker class,
chat template and the rows of their own data files. What changes:

- models: the actor (and a critic or reward model set apart from it) becomes a tiny Qwen2-shaped
  stand-in saved with `save_pretrained` into the work directory, so the real loading code runs.
  It is built around the user's tokenizer when that loads without the network (a local folder, or
  a hub id already in the Hugging Face cache); otherwise around a byte-level tokenizer trained on
  the smoke rows (every byte encodes, so any data tokenizes). A local model that is already small
  (`SMALL_MODEL_PARAMETERS`) is kept.
- data: the first `TRAIN_ROWS` / `VAL_ROWS` rows of `data.train_files` / `data.val_files`,
  read without loading the whole file, written to the work directory as parquet.
- sizes: `PROMPTS_PER_STEP` prompts a step, `rollout.n` at most `SAMPLES_PER_PROMPT` (so group
  estimators still see groups), mini-batches shrunk in proportion (a run that made several
  updates per step still does), micro-batches of one trajectory (accumulation still runs),
  responses at most `MAX_RESPONSE_TOKENS`, two steps, validation and a checkpoint at step 2 when
  the run has them. DAPO's group filter is turned off: a random stand-in's groups have no reward
  variance, so it would discard every group. An adapter of the real model (LoRA) is dropped.
- placement: one CPU rank, the built-in `hf` rollout engine, one replica and one agent worker.
- outputs: checkpoints, metrics, profiles, rollout dumps and Ray's session files go to the work
  directory; `wandb`, `mlflow` and `swanlab` become `jsonl` (accounts, network, files elsewhere).

Once rewritten, the config's `trainer.smoke` is false again; a launcher that builds the typed
config from a composition still marked `trainer.smoke=true` is refused (schema), so a smoke run is
never silently a full run.

`run_smoke(raw, run)` makes the work directory (under `TMPDIR`), turns off `.pyc` writing and hub
downloads, prints the replacement lines, runs, and ends with one verdict line that names what of
the user's own code showed in the metrics. A user mistake, and a reward function that raises on
every sample (both trainers fail such samples and stop when a whole batch fails; one that
propagates, as from V0's batch manager, is named from the traceback), end as one `error:` line
naming the function; anything else prints its traceback and then the verdict.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from core_v1.utils.vision import is_vision_config

SMOKE_STEPS = 2
TRAIN_ROWS = 8
VAL_ROWS = 4
PROMPTS_PER_STEP = 2
SAMPLES_PER_PROMPT = 2
MAX_RESPONSE_TOKENS = 32
# A local model at most this large trains two CPU steps in seconds, so it is used as it is.
SMALL_MODEL_PARAMETERS = 20_000_000
STAND_IN_SHAPE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
# Micro-batch keys (counted in trajectories); set ones become 1. A disabled reward model's are left.
MICRO_BATCH_KEYS = tuple(
    f"{section}.{key}"
    for section, keys in (
        ("actor_rollout_ref.actor", ("ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu")),
        ("actor_rollout_ref.rollout", ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")),
        ("actor_rollout_ref.ref", ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")),
        (
            "critic",
            (
                "ppo_micro_batch_size",
                "ppo_micro_batch_size_per_gpu",
                "forward_micro_batch_size",
                "forward_micro_batch_size_per_gpu",
            ),
        ),
    )
    for key in keys
)
# Loggers that need an account or the network, or write outside trainer.default_local_dir.
REMOTE_LOGGERS = ("wandb", "mlflow", "swanlab")
# Metric prefixes rlbridge itself writes; others come from the user's code (worker, hooks, reward).
_OWN_METRIC_PREFIXES = (
    "actor/",
    "critic/",
    "timing_s/",
    "timing_per_token_ms/",
    "perf/",
    "response_length/",
    "prompt_length/",
    "rollout/",
    "training/",
    "val/",
    "val-core/",
    "ref/",
    "reward_model/",
    "global_seqlen/",
    "num_turns/",
    "rollout_corr/",
    "weight_sync/",
    "pf_ppo/",
    "step",
)


@dataclass(frozen=True)
class Replacement:
    """What the smoke run changed for one reason: `(what, old, new)` triples, and the reason."""

    changes: tuple[tuple[str, Any, Any], ...]
    why: str

    def line(self) -> str:
        changed = ", ".join(f"{what} {_show(old)} -> {_show(new)}" for what, old, new in self.changes)
        return f"smoke: {changed} ({self.why})"


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(str, value))}]"
    return str(value)


# ------------------------------------------------------------------------- the config rewrite
def smoke_config(raw: DictConfig, workdir: str | os.PathLike) -> list[Replacement]:
    """Rewrite `raw` in place into its smoke form (see the module docstring); models and data go
    to `workdir`. Returns what was replaced, in the order it was done."""
    return _SmokeRewrite(raw, Path(workdir)).apply()


class _SmokeRewrite:
    def __init__(self, raw: DictConfig, workdir: Path):
        self.raw, self.workdir = raw, workdir
        self.replacements: list[Replacement] = []

    def apply(self) -> list[Replacement]:
        with open_dict(self.raw):
            self._data()
            self._models()
            self._sizes()
            self._schedule()
            self._placement()
            self._outputs()
            # The config is now its smoke form: what reads it next is told nothing is left to do.
            self.raw.trainer.smoke = False
        return self.replacements

    # -- reading and writing keys
    def get(self, key: str) -> Any:
        value = OmegaConf.select(self.raw, key, default=None, throw_on_resolution_failure=False)
        return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value

    def is_interpolation(self, key: str) -> bool:
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(self.raw, parent_key) if parent_key else self.raw
        node = parent._get_node(leaf) if isinstance(parent, DictConfig) else None
        return node is not None and node._is_interpolation()

    def set(self, key: str, value: Any) -> Any:
        """Set `key` to `value`; returns the old value."""
        old = self.get(key)
        OmegaConf.update(self.raw, key, value, merge=False, force_add=True)
        return old

    def change(self, why: str, **values: Any) -> None:
        """Set each `key=value` (`__` for `.` in the keyword); the ones that changed make one line."""
        changes = []
        for name, value in values.items():
            key = name.replace("__", ".")
            if self.get(key) != value:
                changes.append((key, self.set(key, value), value))
        if changes:
            self.replacements.append(Replacement(tuple(changes), why))

    def replace(self, what: str, key: str, value: Any, why: str, old: Any = None, new: Any = None) -> None:
        """Set one key that stands for a thing (a model, a data set); the line names the thing, and
        shows `old` / `new` in place of the raw values when given."""
        was = self.set(key, value)
        self.replacements.append(
            Replacement(((what, was if old is None else old, value if new is None else new),), why)
        )

    # -- data
    def _data(self) -> None:
        self.rows: list[dict] = []
        for key, limit, name in (("data.train_files", TRAIN_ROWS, "train"), ("data.val_files", VAL_ROWS, "val")):
            files = self.get(key)
            if not files:
                continue
            table = head_rows(files, limit, key)
            out = self.workdir / "data" / f"{name}.parquet"
            out.parent.mkdir(parents=True, exist_ok=True)
            import pyarrow.parquet as pq

            pq.write_table(table, out)
            self.rows += table.to_pylist()
            files = files if isinstance(files, list) else [files]
            shown = files[0] if len(files) == 1 else f"{files[0]} (and {len(files) - 1} more)"
            self.replace(
                f"{name} data",
                key,
                str(out),
                f"its first {table.num_rows} rows: two steps need only a handful of your rows",
                old=shown,
            )

    # -- models
    def _models(self) -> None:
        actor_key = "actor_rollout_ref.model.path"
        path = str(self.get(actor_key))
        trust = bool(self.get("actor_rollout_ref.model.trust_remote_code"))
        small = small_local_model(path, trust)
        stand_in = None
        vision = local_vision_config(path, trust) if small is None else None
        if small is not None:
            print(f"smoke: actor model {path} kept (a local model of {small / 1e6:.1f}M parameters runs on the CPU)")
        elif vision is not None:
            stand_in = self.workdir / "model"
            count = build_vision_stand_in(path, vision, stand_in)
            self.replace(
                "actor model",
                actor_key,
                str(stand_in),
                f"{type(vision).__name__.removesuffix('Config')}-shaped, 2 layers and a 2-block vision tower, "
                f"{count / 1e6:.2f}M parameters, with your processor and tokenizer from {path}: two CPU "
                "steps cannot carry the real model",
                new=f"tiny stand-in at {stand_in}",
            )
            self.change(
                "the stand-in's folder holds its tokenizer",
                actor_rollout_ref__model__tokenizer_path=None,
                data__tokenizer=None,
            )
        else:
            tokenizer_key = next(
                (k for k in ("actor_rollout_ref.model.tokenizer_path", "data.tokenizer") if self.get(k)), actor_key
            )
            tokenizer, source = self._tokenizer(str(self.get(tokenizer_key)), trust)
            stand_in = self.workdir / "model"
            count = build_stand_in(tokenizer, stand_in)
            self.replace(
                "actor model",
                actor_key,
                str(stand_in),
                f"Qwen2-shaped, {STAND_IN_SHAPE['num_hidden_layers']} layers, {count / 1e6:.2f}M parameters, "
                f"with {source}: two CPU steps cannot carry the real model",
                new=f"tiny stand-in at {stand_in}",
            )
            # The stand-in folder holds the tokenizer too; a separate tokenizer path would not match it.
            self.change(
                "the stand-in's folder holds its tokenizer",
                actor_rollout_ref__model__tokenizer_path=None,
                data__tokenizer=None,
            )
            if self.get("actor_rollout_ref.model.lora_adapter_path"):
                self.change(
                    "an adapter of the real model does not fit the stand-in; a fresh one trains",
                    actor_rollout_ref__model__lora_adapter_path=None,
                )
        self._model_apart("critic.model.path", "critic model", stand_in, self.get("critic.enable") is not False)
        self._reward_model(stand_in)

    def _tokenizer(self, source: str, trust_remote_code: bool) -> tuple[Any, str]:
        """The user's tokenizer when it loads without the network, else one trained on the smoke rows."""
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(
                os.path.expanduser(source), local_files_only=True, trust_remote_code=trust_remote_code
            )
            return tokenizer, f"your tokenizer from {source}"
        except Exception:  # noqa: BLE001 - not local (or not a tokenizer): the stand-in brings its own
            return rows_tokenizer(
                self.rows
            ), f"a byte-level tokenizer trained on your rows, since {source} is not on this machine"

    def _model_apart(self, key: str, what: str, stand_in: Optional[Path], used: bool) -> None:
        """A model set apart from the actor's (not the `${...}` default) is replaced by the same stand-in."""
        path = self.get(key)
        if not used or not path or self.is_interpolation(key) or stand_in is None or str(path) == str(stand_in):
            return
        if small_local_model(str(path), False) is None:
            self.replace(what, key, str(stand_in), "the actor's stand-in stands in for it too")

    def _reward_model(self, stand_in: Optional[Path]) -> None:
        key = "reward.reward_model.model_path"
        path = self.get(key)
        if not self.get("reward.reward_model.enable") or not path or small_local_model(str(path), False) is not None:
            return
        if self.get("reward.reward_model.micro_batch_size_per_gpu"):
            self.change("one trajectory per micro-batch", reward__reward_model__micro_batch_size_per_gpu=1)
        from transformers import AutoTokenizer

        source = stand_in or Path(str(self.get("actor_rollout_ref.model.path")))
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        out = self.workdir / "reward_model"
        build_stand_in(tokenizer, out, sequence_classifier=True)
        self.replace(
            "reward model", key, str(out), "a one-label stand-in of the same shape, with the policy's tokenizer"
        )
        if self.get("reward.reward_model.input_tokenizer"):
            self.change("the policy's stand-in tokenizer", reward__reward_model__input_tokenizer=None)

    # -- sizes
    def _sizes(self) -> None:
        train = self.get("data.train_batch_size")
        actor_mini = self.get("actor_rollout_ref.actor.ppo_mini_batch_size")
        n = min(int(self.get("actor_rollout_ref.rollout.n")), SAMPLES_PER_PROMPT)
        mini = shrunk(actor_mini, train)
        self.change(
            "a few prompts a step; mini-batches in proportion, so a run that updated several times a step still does",
            data__train_batch_size=PROMPTS_PER_STEP,
            actor_rollout_ref__actor__ppo_mini_batch_size=mini,
            actor_rollout_ref__rollout__n=n,
        )
        if self.get("data.gen_batch_size"):
            self.change(
                "generation batch in proportion to the training batch",
                data__gen_batch_size=max(
                    PROMPTS_PER_STEP, shrunk(self.get("data.gen_batch_size"), train, upper=4 * PROMPTS_PER_STEP)
                ),
            )
        if not self.is_interpolation("critic.ppo_mini_batch_size"):
            self.change(
                "in proportion, as the actor's",
                critic__ppo_mini_batch_size=shrunk(self.get("critic.ppo_mini_batch_size"), train),
            )
        if self.get("trainer.v1.trainer_mode") not in ("sync", "colocate_async"):  # separate_async or a user's mode
            self.change(
                "separate_async needs train_batch_size == parameter_sync_step x ppo_mini_batch_size",
                trainer__v1__separate_async__parameter_sync_step=max(1, PROMPTS_PER_STEP // mini),
            )
        micro = {
            key.replace(".", "__"): 1 for key in MICRO_BATCH_KEYS if self.get(key) and not self.is_interpolation(key)
        }
        self.change("one trajectory per micro-batch, so gradient accumulation runs as in your run", **micro)
        if self.get("data.val_batch_size"):
            self.change(
                "the smoke validation set is small", data__val_batch_size=min(self.get("data.val_batch_size"), VAL_ROWS)
            )
        self.change(
            "short responses keep two CPU steps short",
            data__max_response_length=min(int(self.get("data.max_response_length")), MAX_RESPONSE_TOKENS),
        )
        if not self.is_interpolation("actor_rollout_ref.rollout.response_length"):
            self.change(
                "short responses keep two CPU steps short",
                actor_rollout_ref__rollout__response_length=min(
                    int(self.get("actor_rollout_ref.rollout.response_length")), MAX_RESPONSE_TOKENS
                ),
            )
        self.change(
            "validation samples a few per prompt",
            actor_rollout_ref__rollout__val_kwargs__n=min(
                int(self.get("actor_rollout_ref.rollout.val_kwargs.n")), SAMPLES_PER_PROMPT
            ),
        )

    # -- schedule
    def _schedule(self) -> None:
        self.change("two steps", trainer__total_training_steps=SMOKE_STEPS)
        if (self.get("trainer.test_freq") or -1) > 0:
            self.change("your run validates: the smoke run does once, at its last step", trainer__test_freq=SMOKE_STEPS)
        if (self.get("trainer.save_freq") or -1) > 0:
            self.change(
                "your run saves checkpoints: the smoke run saves one, into the work directory",
                trainer__save_freq=SMOKE_STEPS,
            )
        if self.get("trainer.critic_warmup"):
            self.change(
                "the actor still updates within two steps",
                trainer__critic_warmup=min(int(self.get("trainer.critic_warmup")), SMOKE_STEPS - 1),
            )
        if self.get("trainer.resume_mode") == "resume_path":
            self.change("your checkpoint belongs to the real model", trainer__resume_mode="disable")
        if self.get("algorithm.filter_groups.enable"):
            # A random stand-in gives every sample of a group the same reward, so DAPO's filter
            # would discard every group and regenerate without end.
            self.change(
                "the stand-in's groups have no reward variance to filter on", algorithm__filter_groups__enable=False
            )

    # -- placement
    def _placement(self) -> None:
        self.change("one CPU rank: no GPU needed", trainer__nnodes=1, trainer__n_gpus_per_node=1, trainer__device="cpu")
        self.change(
            "the built-in engine runs on the CPU; one replica and one agent-loop worker",
            actor_rollout_ref__rollout__name="hf",
            actor_rollout_ref__rollout__nnodes=0,
            actor_rollout_ref__rollout__tensor_model_parallel_size=1,
            actor_rollout_ref__rollout__data_parallel_size=1,
            actor_rollout_ref__rollout__num_replicas=1,
            actor_rollout_ref__rollout__num_cpus_per_replica=1,
            actor_rollout_ref__rollout__engine_kwargs={},
            actor_rollout_ref__rollout__agent__num_workers=1,
            reward__num_workers=1,
        )
        compiled = {
            f"{section.replace('.', '__')}__use_torch_compile": False
            for section in ("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "critic.fsdp")
        }
        self.change("compiling costs more than two CPU steps", **compiled)
        ray_init = dict(self.get("ray_kwargs.ray_init") or {})
        if ray_init.get("address"):
            self.change("a private local Ray, not your cluster", ray_kwargs__ray_init__address=None)

    # -- outputs
    def _outputs(self) -> None:
        out = self.workdir / "outputs"
        loggers = self.get("trainer.logger")
        loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
        kept = [name for name in loggers if name not in REMOTE_LOGGERS]
        self.change(
            "remote loggers need an account and write elsewhere; metrics go to jsonl in the work directory",
            trainer__logger=list(dict.fromkeys([*kept, "jsonl"])),
        )
        self.change(
            "every output stays in the work directory",
            trainer__default_local_dir=str(out),
            trainer__default_hdfs_dir=None,
        )
        if self.get("global_profiler.tool"):
            self.change("profilers need the real hardware", global_profiler__tool=None)
        self.change("every output stays in the work directory", global_profiler__save_path=str(out / "profile"))
        if self.get("skip.rollout.dump_dir") or self.get("skip.rollout.enable"):
            self.change(
                "rollout dumps of the real model do not fit the stand-in",
                skip__rollout__dump_dir=str(out / "rollout_dump"),
            )
        for key, folder in (
            ("trainer.rollout_data_dir", "rollout_data"),
            ("trainer.validation_data_dir", "validation_data"),
        ):
            if self.get(key):
                self.change("every output stays in the work directory", **{key.replace(".", "__"): str(out / folder)})
        if self.get("ray_kwargs.timeline_json_file"):
            self.change(
                "every output stays in the work directory", ray_kwargs__timeline_json_file=str(out / "timeline.json")
            )
        # Not a user setting: Ray's session files (logs, sockets) go to a temporary directory too.
        OmegaConf.update(self.raw, "ray_kwargs.ray_init._temp_dir", str(ray_temp_dir(self.workdir)), force_add=True)


# Ray's sockets live in <temp dir>/session_<date>_<time>_<micro>_<pid>/sockets/ (about 64 bytes)
# and a socket path may not exceed 107 bytes.
_RAY_TEMP_DIR_MAX = 107 - 64


def ray_temp_dir(workdir: Path) -> Path:
    """`workdir/ray`, or a short temporary directory of its own when that path leaves Ray's socket
    paths too long (a deep TMPDIR)."""
    inside = workdir / "ray"
    if len(str(inside)) <= _RAY_TEMP_DIR_MAX:
        return inside
    short = Path(tempfile.mkdtemp(prefix="rlbridge-smoke-ray-", dir="/tmp"))
    print(f"smoke: Ray's session files go to {short} ({inside} would make its socket paths longer than 107 bytes)")
    return short


def shrunk(value: int, train_batch_size: int, upper: int = PROMPTS_PER_STEP) -> int:
    """`value` (a count of prompts) scaled as `train_batch_size` goes to PROMPTS_PER_STEP: same ratio, at least 1."""
    return max(1, min(upper, math.ceil(int(value) * PROMPTS_PER_STEP / max(1, int(train_batch_size)))))


# ------------------------------------------------------------------------- data and models
def head_rows(files: Any, limit: int, key: str):
    """The first `limit` rows of parquet `files` (a path or a list), read batch by batch, not whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from core_v1.data import DataError

    tables, count = [], 0
    for path in files if isinstance(files, list) else [files]:
        path = Path(str(path)).expanduser()
        if not path.is_file():
            raise DataError(
                f"data file {str(path)!r} does not exist; check {key} (a smoke run reads a few rows of your own data)"
            )
        try:
            batch = next(pq.ParquetFile(path).iter_batches(batch_size=limit - count), None)
        except Exception as error:  # pyarrow raises several types for a file that is not parquet
            raise DataError(f"{path}: cannot read as parquet ({error})") from None
        if batch is not None:
            tables.append(pa.Table.from_batches([batch]))
            count += batch.num_rows
        if count >= limit:
            break
    if not count:
        raise DataError(f"{key}: no rows to take for the smoke run")
    return pa.concat_tables(tables, promote_options="default")


def small_local_model(path: str, trust_remote_code: bool) -> Optional[int]:
    """The parameter count of a local model at most SMALL_MODEL_PARAMETERS large, else None (counted
    on the meta device from its config, so nothing is loaded)."""
    if not Path(os.path.expanduser(path)).is_dir():
        return None
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    try:
        config = AutoConfig.from_pretrained(os.path.expanduser(path), trust_remote_code=trust_remote_code)
        auto_class = AutoModelForImageTextToText if is_vision_config(config) else AutoModelForCausalLM
        with torch.device("meta"):
            model = auto_class.from_config(config, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - not a causal LM we can size: the stand-in takes its place
        return None
    count = sum(p.numel() for p in model.parameters())
    return count if count <= SMALL_MODEL_PARAMETERS else None


def local_vision_config(path: str, trust_remote_code: bool) -> Any:
    """The config of a vision-language model whose folder is on this machine (weights or not), else None."""
    from transformers import AutoConfig

    if not Path(os.path.expanduser(path)).is_dir():
        return None
    try:
        config = AutoConfig.from_pretrained(os.path.expanduser(path), trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - not a config transformers reads: the text stand-in takes its place
        return None
    return config if is_vision_config(config) else None


_WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json", ".bin.index.json")


def build_vision_stand_in(path: str, config: Any, out: Path) -> int:
    """A tiny model of the user's vision-language family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) in `out`: their
    config shrunk (2 layers, hidden 32, a 2-block vision tower; token ids and vocabulary kept) with
    random weights, beside their own processor and tokenizer files. Returns its parameter count."""
    import copy
    import shutil

    import torch
    from transformers import AutoModelForImageTextToText

    config = copy.deepcopy(config)
    text, vision = config.get_text_config(), config.vision_config
    for key, value in {**STAND_IN_SHAPE, "max_window_layers": 2, "layer_types": None}.items():
        setattr(text, key, value)
    text.layer_types = ["full_attention"] * text.num_hidden_layers
    rope = dict(getattr(text, "rope_parameters", None) or {})
    if "mrope_section" in rope:  # the rotary half-dimension (head_dim 8 -> 4) split over (t, h, w)
        text.rope_parameters = {**rope, "mrope_section": [2, 1, 1]}
    if getattr(text, "head_dim", None):  # Qwen3-VL states it; 8 is what the hidden size above gives each head
        text.head_dim = STAND_IN_SHAPE["hidden_size"] // STAND_IN_SHAPE["num_attention_heads"]
    if getattr(text, "num_experts", None):  # Qwen3-VL-MoE
        text.num_experts, text.num_experts_per_tok, text.moe_intermediate_size = 4, 2, 16
    vision.depth, vision.num_heads = 2, 2
    if hasattr(vision, "deepstack_visual_indexes"):  # Qwen3-VL: the first block feeds the first language layer
        vision.hidden_size, vision.out_hidden_size, vision.intermediate_size = 32, text.hidden_size, 64
        vision.deepstack_visual_indexes = [0]
    elif hasattr(vision, "out_hidden_size"):  # Qwen2.5-VL: windowed blocks but the last
        vision.hidden_size, vision.out_hidden_size, vision.intermediate_size = 32, text.hidden_size, 64
        vision.fullatt_block_indexes = [1]
    else:
        vision.embed_dim, vision.hidden_size, vision.mlp_ratio = 32, text.hidden_size, 2
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config)
    out.mkdir(parents=True, exist_ok=True)
    for source in Path(os.path.expanduser(path)).iterdir():
        if source.is_file() and source.name != "config.json" and not source.name.endswith(_WEIGHT_FILES):
            shutil.copy(source, out / source.name)
    model.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def rows_tokenizer(rows: list[dict], vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on the rows' text, with every byte in its alphabet (any
    text encodes), ChatML markers and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator([*map(str, rows), "system user assistant tool"], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<|im_end|>", additional_special_tokens=specials[1:]
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def build_stand_in(tokenizer: Any, out: Path, sequence_classifier: bool = False) -> int:
    """Save a tiny Qwen2-shaped model sized to `tokenizer` (and the tokenizer) to `out`; returns
    its parameter count."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        num_labels=1,
        **STAND_IN_SHAPE,
    )
    from transformers.utils import logging as transformers_logging

    torch.manual_seed(0)
    model = (Qwen2ForSequenceClassification if sequence_classifier else Qwen2ForCausalLM)(config)
    if not sequence_classifier:
        model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=pad)
    out.mkdir(parents=True, exist_ok=True)
    transformers_logging.disable_progress_bar()  # its bar would cut through the replacement lines
    try:
        model.save_pretrained(out)
    finally:
        transformers_logging.enable_progress_bar()
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------- the run
@contextmanager
def _contained() -> Iterator[None]:
    """No `.pyc` files beside the user's code and no hub downloads while the smoke run lasts
    (the environment is inherited by Ray's workers); restored afterwards for in-process callers."""
    saved = {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    saved_flag = sys.dont_write_bytecode
    os.environ.update(PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved_flag
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_smoke(raw: DictConfig, run: Callable[[DictConfig], Any]) -> int:
    """Rewrite `raw` (see `smoke_config`), print what changed, `run(raw)`, and print the verdict.

    Returns 0 when the two steps ran; 2 with one
    `error:` line for a user mistake (the entrypoint's list); for anything else the traceback, the
    verdict and 1.
    """
    from core_v1.errors import is_user_error  # the entrypoint's own list of user mistakes

    label = f"V1 ({raw.trainer.v1.trainer_mode})" if raw.trainer.use_v1 else "V0"
    with _contained():
        workdir = Path(tempfile.mkdtemp(prefix="rlbridge-smoke-"))
        print(f"smoke: a two-step CPU run of your own code; everything it writes goes to {workdir}")
        for replacement in smoke_config(raw, workdir):
            print(replacement.line())
        started = time.monotonic()
        try:
            run(raw)
        except Exception as error:
            took = f"after {time.monotonic() - started:.0f} s"
            reward_failure = raised_in_reward_function(error, raw) or _name_the_reward_function(error, raw)
            if is_user_error(error) or reward_failure:
                print(
                    f"error: smoke run on {label} failed {took}: {reward_failure or _first_line(error)}",
                    file=sys.stderr,
                )
                return 2
            traceback.print_exc()
            print(f"smoke: FAILED on {label} {took}: {type(error).__name__}: {_first_line(error)}", file=sys.stderr)
            return 1
        if not raw.trainer.dry_run:
            print(verdict(workdir / "outputs" / "metrics.jsonl", label, time.monotonic() - started))
        return 0


def raised_in_reward_function(error: BaseException, raw: DictConfig) -> Optional[str]:
    """`reward function PATH:NAME raised TYPE: MESSAGE (file:line)` when `error` came out of the
    configured `reward.custom_reward_function` (V0's reward managers let it propagate; V1 names it
    in its failed-sample line already), else None."""
    custom = raw.reward.custom_reward_function
    if not custom.path:
        return None
    reward_file = Path(str(custom.path)).expanduser().resolve()
    frames = [
        frame for frame in traceback.extract_tb(error.__traceback__) if Path(frame.filename).resolve() == reward_file
    ]
    if not frames:
        return None
    where = f"{frames[-1].filename}:{frames[-1].lineno}"
    return (
        f"reward function {custom.path}:{custom.name or 'compute_score'} raised {type(error).__name__}: "
        f"{_first_line(error)} ({where})"
    )


def _name_the_reward_function(error: BaseException, raw: DictConfig) -> Optional[str]:
    """The error's line with the configured reward function named, when the line blames "the
    reward function" without naming it (V0's all-samples-failed message), else None."""
    custom, text = raw.reward.custom_reward_function, _first_line(error)
    spec = f"{custom.path}:{custom.name or 'compute_score'}"
    if not custom.path or "reward function" not in text or f"{Path(str(custom.path)).name}:" in text:
        return None
    return f"{text} (reward function {spec})"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def verdict(metrics_file: Path, label: str, seconds: float) -> str:
    """One line: steps run, score, failed samples, and what of the user's own code the metrics show
    (the agent loops that made the trajectories, metrics rlbridge does not write itself)."""
    from core_v1.utils.tracking import read_metrics

    rows = read_metrics(metrics_file) if metrics_file.is_file() else []
    steps = [row for row in rows if row.get("step", 0) > 0]
    if len(steps) < SMOKE_STEPS:
        return f"smoke: FAILED on {label}: {len(steps)} of {SMOKE_STEPS} steps logged in {metrics_file}"
    failed = sum(int(row.get("rollout/failed_samples", 0)) for row in steps)
    loops = sorted({key.split("/")[2] for row in steps for key in row if key.startswith("rollout/agent_loop/")})
    yours = sorted({key for row in rows for key in row if not key.startswith(_OWN_METRIC_PREFIXES)})
    parts = [
        f"{len(steps)} steps",
        f"score {steps[-1].get('critic/score/mean', float('nan')):.3f}",
        f"{failed} failed samples",
    ]
    if loops:
        parts.append(f"agent loops {', '.join(loops)}")
    if yours:
        parts.append(f"metrics of your reward, loops and code: {_grouped(yours)}")
    status = "passed" if failed == 0 else "passed with failed samples"
    return f"smoke: {status} on {label} in {seconds:.0f} s: {'; '.join(parts)}"


def _grouped(keys: list[str], most: int = 3) -> str:
    """Metric names, those of a prefix with more than `most` of them as `prefix/* (count)`."""
    by_prefix: dict[str, list[str]] = {}
    for key in keys:
        by_prefix.setdefault(key.split("/", 1)[0], []).append(key)
    shown = [
        f"{prefix}/* ({len(group)})" if len(group) > most else ", ".join(group) for prefix, group in by_prefix.items()
    ]
    return ", ".join(shown)

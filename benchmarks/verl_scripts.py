"""verl's own launch scripts through `trainer.dry_run=true`: how many does rlbridge accept?

    python benchmarks/verl_scripts.py VERL [--tags v0.5.0 ... main] [--mode v1|v0] [--show N] [--where] [--sample N]
        [--grep REGEX]

VERL is a verl checkout (read as it is) or a bare git mirror of verl (each `--tag`, a tag or a
branch such as `main`, is exported to a temporary folder with `git archive`: the whole tree but
verl's own Python code, which rlbridge's users do not run; the reward functions under `KEPT_CODE`,
which scripts name by file path, stay). The launch scripts are the `.sh` files
under `SCRIPT_FOLDERS` (`examples/`, `recipe/`, `tests/special_e2e/`, `verl/experimental/`); each
runs from the root of its own tag's tree, so the configs it names (`$(pwd)/examples/...`,
`hydra.searchpath` into `verl/trainer/config`) are that tag's. Nothing of verl is copied into this
project.

`--mode v1` (default): the tree is copied to a temporary folder, only its launch scripts are
migrated there with `python -m codemods.migrate` (the YAML configs they name stay verl's), and
every trainer launch in them is dry-run as written (V1).
`--mode v0`: the scripts are read unchanged and every launch is dry-run with
`trainer.use_v1=false` added. Launches are found and expanded by `codemods.dry_run_report` (the
same reading of scripts as the migration tool); a launch whose words only running bash could
tell is counted as "not expanded". Model and data paths are replaced by the same stand-ins for
every launch (`STAND_INS`), as the user's files are not here.

Variables the user sets before running a script (`$MODEL_PATH`, `$NNODES`, neither assigned in the
script nor given a default there), and variables assigned from a command only the shell can run
(`$(now)`), get the value a user would give them, chosen by the key they feed (`typical_value`; for
`--config-name "$1"`, verl's own `ppo_trainer`):
verl's default for that key, else the schema's, else a path or a name; so does a value the script
leaves for the user to write in (`"<path_to_dist_ckpt>"`). They are not counted as refusals; the report says how many launches needed them. (Run for real, such a variable left
unset expands to nothing, and the empty value is one error line that says so.)

The report gives, per tag, the launches found, how many passed, failed or were not expanded, the
acceptance rate (passed / launches), and every failure's reason grouped (key values stripped),
most frequent first; it ends with one table row per tag. A launch of a trainer entry rlbridge lacks
(a verl recipe's own trainer: the migration marks it and leaves it) counts as failed, with the
entry's line as its reason.

A launch verl itself cannot run as written at that tag is counted apart, as "broken as written", and
left out of the acceptance rate, whatever rlbridge makes of it. `broken_on_verl` decides it from the
launch's words and the tag's own tree only: a `--config-name` no folder of the tag holds under its
`--config-path`, a reward function file (`custom_reward_function.path`) inside the checkout that the
tag does not have, an override Hydra's own parser cannot read (`name=run_8npu}`), or a
`trainer.logger` written as one quoted string (`'[console,wandb]'`, which
Hydra reads as the string, not a list, and verl's tracking refuses as a backend name). After the dry
run, a key rlbridge calls unknown that the launch sets without `+` and that neither verl's trainer
configs of the tag (the key table) nor any YAML of the tree define (`_unknown_to_verl`: Hydra refuses
to override it, so verl stops too). A path into a
git submodule of verl (`recipe/`, not in the tag's archive) is never counted as missing. `--sample N` dry-runs N scripts per tag, spread evenly over them;
`--grep REGEX` only the scripts whose text matches (e.g. the multimodal ones:
`--grep '-VL|VL-|_vl[_./ -]|image_key|video_key|geo3k/|GLM-4\\.[15]V'`). Refusals because a script's own code imports a module this machine lacks
(`verl` itself, `aiohttp`, ...) count as refusals, and are summed in one line per tag. The exit code is 1 when a dry run ended in a traceback (a bug of ours).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from codemods.dry_run_report import Outcome, ScriptLaunch, dry_run, read_launches, replace_paths  # noqa: E402
from shims.rename_table import normalize_value  # noqa: E402
from shims.verl_keys.verdicts import verl_keys  # noqa: E402

SCRIPT_FOLDERS = ("examples", "recipe", "tests/special_e2e", "verl/experimental")
DEFAULT_TAGS = ("v0.5.0", "v0.6.1", "v0.7.1", "v0.8.0", "v0.9.0", "main")
# verl's own code: rlbridge's users do not run it, and a `verl` package on the path would stand for an
# installed verl (shims.verl_imports serves verl's names only where verl is not installed).
VERL_CODE = "verl"
# ... but for the reward functions verl's scripts name by file path (reward.custom_reward_function.path=
# $REPO_ROOT/verl/utils/reward_score/rlla.py): loaded as the user's own file, from the user's checkout.
KEPT_CODE = ("verl/utils/reward_score",)
# Model and data paths are the user's machine's; the dry run checks the config, so every script gets
# the same stand-ins (the plan says they are not here, which is no refusal).
STAND_INS = {"model": "models/verl-model", "train": "data/train.parquet", "val": "data/val.parquet"}


@dataclass
class TagReport:
    """The outcome of every launch found in one tag's scripts."""

    tag: str
    scripts: int = 0
    outcomes: list[tuple[ScriptLaunch, Outcome]] = field(default_factory=list)
    user_variables: Counter = field(default_factory=Counter)  # variable -> launches that needed its stand-in
    launches_with_user_variables: int = 0

    broken: dict[int, str] = field(default_factory=dict)  # outcome index -> why verl cannot run it as written

    def count(self, kind: str) -> int:
        """Launches verl can run that ended as `kind`."""
        return sum(outcome.kind == kind for _, outcome in self.runnable())

    def runnable(self) -> list[tuple[ScriptLaunch, Outcome]]:
        """The launches verl itself can run as written (see `broken_on_verl`)."""
        return [pair for index, pair in enumerate(self.outcomes) if index not in self.broken]

    @property
    def acceptance(self) -> float:
        """Passed / launches verl can run as written."""
        runnable = len(self.runnable())
        return self.count("passes") / runnable if runnable else 0.0

    def reasons(self) -> Counter:
        return Counter(group_reason(outcome) for _, outcome in self.runnable() if outcome.kind != "passes")

    def broken_reasons(self) -> Counter:
        return Counter(self.broken.values())

    def missing_modules(self) -> Counter:
        """Top-level modules that refused launches' own code imports and this machine lacks (`verl`
        itself, or packages such as `aiohttp`): the user's environment, not a feature of rlbridge."""
        found = (_MISSING_MODULE.search(outcome.reason) for _, outcome in self.runnable() if outcome.kind == "fails")
        return Counter(match.group(1).split(".")[0] for match in found if match)

    def where(self, reason: str) -> list[str]:
        """`script:line` of the launches refused for `reason` (a group of `reasons`)."""
        return [
            f"{launch.script.name}:{launch.line}"
            for launch, outcome in self.runnable()
            if outcome.kind != "passes" and group_reason(outcome) == reason
        ]

    def broken_where(self, reason: str) -> list[str]:
        return [
            f"{self.outcomes[index][0].script.name}:{self.outcomes[index][0].line}"
            for index, why in self.broken.items()
            if why == reason
        ]


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def group_reason(outcome: Outcome) -> str:
    """The reason with values stripped, so that one missing feature counts as one group."""
    text = re.sub(r"=\S+", "=...", outcome.reason)
    text = re.sub(r"\(\d+\)", "(N)", text)
    text = re.sub(r"(?<![\w])'[^'\s]*/[^'\s]*'", "'PATH'", text)  # a quoted path, not the quote of "verl's"
    return f"{outcome.kind}: {text}"


# --------------------------------------------------------------------------- verl's scripts


@contextlib.contextmanager
def scripts_of(verl: Path, tag: str | None) -> Iterator[Path]:
    """The tree of `verl` (at `tag` for a bare mirror, without verl's own Python code)."""
    if not is_bare_mirror(verl):
        yield verl
        return
    with tempfile.TemporaryDirectory(prefix=f"verl-{tag}-") as tmp:
        archive = subprocess.run(["git", "-C", str(verl), "archive", tag], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for code in Path(tmp, VERL_CODE).rglob("*.py"):
            if not any(code.relative_to(tmp).is_relative_to(kept) for kept in KEPT_CODE):
                code.unlink()
        yield Path(tmp)


def is_bare_mirror(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def shell_scripts(root: Path) -> list[Path]:
    return sorted(
        p for folder in SCRIPT_FOLDERS if (root / folder).is_dir() for p in (root / folder).rglob("*.sh") if p.is_file()
    )


def migrate_copy(root: Path, into: Path) -> Path:
    """A copy of `root` whose launch scripts (only) are migrated with `python -m codemods.migrate`
    (output hidden): the configs they name stay as verl wrote them."""
    shutil.copytree(root, into, symlinks=True, dirs_exist_ok=True)
    from codemods.migrate import main as migrate

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        migrate([str(script) for script in shell_scripts(into)])
    return into


# --------------------------------------------------------------------------- user-set variables
_MARK = "@@"
_MARKED = re.compile(rf"{_MARK}([A-Za-z_][A-Za-z0-9_]*|[0-9]+){_MARK}")  # a name, or a positional $1
_PATH_LIKE = re.compile(r"(path|dir|file|files|folder)$")
# A value the script leaves for the user to write (`MCORE_PATH="<path_to_dist_ckpt>"`).
_PLACEHOLDER = re.compile(r"<([A-Za-z_][\w./-]*)>")


def mark_variable(name: str) -> str:
    """The stand-in a variable the user would set expands to while the script is read."""
    return f"{_MARK}{name}{_MARK}"


def fill_user_variables(argv: Sequence[str]) -> tuple[list[str], set[str]]:
    """`argv` with each marked variable replaced by what a user would set; and the variables' names.

    A value that is one variable alone (`key=$VAR`), or a placeholder the script asks the user to
    replace (`key=<path_to_ckpt>`), gets `typical_value(key)`; a variable inside a longer word
    (`name_$DATE`) gets its own name in lower case."""
    out, names = [], set()
    for index, token in enumerate(argv):
        config_name = _config_name_variable(argv, index)
        if config_name is not None:  # `--config-name "$1"`: the config the user names; verl's default one
            names.add(config_name)
            out.append(_MARKED.sub(VERL_CONFIG_NAME, token))
            continue
        key, sep, value = token.partition("=")
        if sep and _PLACEHOLDER.fullmatch(value):  # `<path_to_ckpt>`: the script asks the user to fill it in
            names.add(value)
            out.append(f"{key}={typical_value(key.lstrip('+~'), _PLACEHOLDER.fullmatch(value).group(1))}")
            continue
        found = _MARKED.findall(token)
        if not found:
            out.append(token)
            continue
        names.update(found)
        key, sep, value = token.partition("=")
        whole = _MARKED.fullmatch(value) if sep else None
        if whole:
            out.append(f"{key}={typical_value(key.lstrip('+~'), whole.group(1))}")
        else:
            out.append(_MARKED.sub(lambda m: m.group(1).lower(), token))
    return out, names


# What verl's trainer composes without --config-name; a user-set --config-name gets it.
VERL_CONFIG_NAME = "ppo_trainer"


def _config_name_variable(argv: Sequence[str], index: int) -> str | None:
    """The variable's name when argv[index] is a `--config-name`/`-cn` value that is one variable alone."""
    token = argv[index]
    option, sep, value = token.partition("=")
    if not sep:
        option, value = (argv[index - 1] if index else ""), token
    whole = _MARKED.fullmatch(value)
    return whole.group(1) if whole and option in ("--config-name", "-cn") else None


# verl's async trainers size their rollout pool as a user sizes the trainer's (`rollout.nnodes=$NNODES`).
_SIZED_LIKE = {"rollout.nnodes": "trainer.nnodes", "rollout.n_gpus_per_node": "trainer.n_gpus_per_node"}


def typical_value(key: str, variable: str) -> str:
    """What a user sets a variable feeding `key` to: verl's default for the key, else the schema's, else a
    path (for a key naming a path, directory or file) or the variable's name."""
    key = _SIZED_LIKE.get(key, key)
    default = verl_keys().get(key, {}).get("default")
    if default is None or isinstance(default, (dict, list)) or default == "???":
        default = _schema_default(key)
    if default is not None and not isinstance(default, (dict, list)) and default != "???":
        return normalize_value(default)
    if _PATH_LIKE.search(key.rsplit(".", 1)[-1]):
        return f"/placeholder/{variable.lower()}"
    return variable.lower()


@functools.lru_cache(maxsize=1)
def _schema_reference():
    from omegaconf import OmegaConf

    from core_v1.config.schema import PPOConfig

    return OmegaConf.structured(PPOConfig)


def _schema_default(key: str):
    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(_schema_reference(), key, throw_on_resolution_failure=False)
    except Exception:  # noqa: BLE001 - a key outside the schema has no default
        return None
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


# --------------------------------------------------------------------------- launches verl refuses
_LOGGER_IN_QUOTES = re.compile(r"""^(['"]).*[\[,].*\1$""")


def broken_on_verl(argv: Sequence[str], root: Path, script_text: str = "") -> str | None:
    """Why verl itself cannot run this launch as written from `root` (a checkout of its tag), or None.

    Decided from the launch's words, its script's text and the tree alone (see the module
    docstring); a path into a submodule, outside the checkout (the user's own file), or a file the
    script itself may write (its name on any line but the override's) is never judged missing."""
    options = _config_options(argv)
    # A value the user gives (a variable, a placeholder) is theirs to get right: never judged.
    argv = [token for token in argv if not _user_filled(token)]
    if "--config-name" in options and not any(_user_filled(value) for value in options.values()):
        missing = _missing_config(options["--config-name"], options.get("--config-path", "."), root)
        if missing:
            return missing
    unreadable = _unreadable_override(argv)
    if unreadable is not None:
        return f"an override Hydra's own parser cannot read ({unreadable})"
    for token in argv:
        key, _, value = token.lstrip("+~").partition("=")
        if key.endswith("custom_reward_function.path") and _missing_file(value, root, script_text):
            return "names a reward function file this tag does not have (custom_reward_function.path)"
        if key == "trainer.logger" and _LOGGER_IN_QUOTES.match(value):
            return (
                "trainer.logger is one quoted string, which Hydra reads as a string, not a list, and "
                "verl's tracking refuses as a backend name"
            )
    return None


def _unreadable_override(argv: Sequence[str]) -> str | None:
    """The key of the first override Hydra's parser refuses (`name=run_8npu}`), which verl's Hydra
    refuses as written too."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for token in argv:
        if token.startswith("-") or "=" not in token.lstrip("~"):
            continue
        try:
            parser.parse_override(token)
        except HydraException:  # OverrideParseException, or the grammar's own error
            return token.partition("=")[0]
    return None


def _user_filled(token: str) -> bool:
    """Whether the token holds a variable the user sets (marked) or a placeholder they write in."""
    return _MARK in token or bool(_PLACEHOLDER.search(token))


def _config_options(argv: Sequence[str]) -> dict[str, str]:
    """`--config-path`/`--config-name` (and `-cp`/`-cn`), in either `--opt=value` or `--opt value` form."""
    names = {
        "--config-path": "--config-path",
        "-cp": "--config-path",
        "--config-name": "--config-name",
        "-cn": "--config-name",
    }
    found = {}
    for index, token in enumerate(argv):
        option, sep, value = token.partition("=")
        if option in names:
            found[names[option]] = (value if sep else (argv[index + 1] if index + 1 < len(argv) else "")).strip("'\"")
    return found


def _missing_config(name: str, folder: str, root: Path) -> str | None:
    """Hydra reads a relative `--config-path` from the entry module's folder: the config is missing
    when no folder of the tree ending in `folder` holds it (an absolute path is checked as it is)."""
    file = name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"
    if Path(folder).is_absolute():
        if not _inside(Path(folder), root) or _in_submodule(Path(folder), root) or (Path(folder) / file).is_file():
            return None
        return f"--config-name={name}: no such config in --config-path={folder} at this tag"
    here = root / folder
    if folder not in ("", ".") and here.is_dir() and not _in_submodule(here, root):  # the folder itself (the migration
        # puts the old entry's folder in front of its relative --config-path): judged exactly
        return None if (here / file).is_file() else f"--config-name={name}: no such config in --config-path={folder}"
    tail = Path(folder) / file
    if any(found.as_posix().endswith(tail.as_posix().lstrip("./")) for found in root.rglob(Path(file).name)):
        return None
    if _submodules(root):  # the config might live in a submodule the archive lacks
        return None
    return f"--config-name={name}: no folder '{folder}' of this tag holds it"


def _missing_file(value: str, root: Path, script_text: str) -> bool:
    """A reward file the tag lacks that the script names only in the override itself."""
    if value.lower() in ("", "null", "none") or _present(value, root):
        return False
    name = Path(value).name
    mentions = [line for line in script_text.splitlines() if name in line]
    return all("custom_reward_function.path=" in line for line in mentions)


def _present(path: str, root: Path) -> bool:
    """Whether a file the launch names exists, or cannot be judged (outside the checkout, in a submodule)."""
    file = Path(path) if Path(path).is_absolute() else root / path
    return not _inside(file, root) or _in_submodule(file, root) or file.exists()


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def _in_submodule(path: Path, root: Path) -> bool:
    relative = path.resolve().relative_to(root.resolve())
    return any(relative.is_relative_to(module) for module in _submodules(root))


def _submodules(root: Path) -> list[str]:
    gitmodules = root / ".gitmodules"
    if not gitmodules.is_file():
        return []
    return re.findall(r"^\s*path\s*=\s*(\S+)", gitmodules.read_text(errors="replace"), flags=re.M)


# --------------------------------------------------------------------------- running


def dry_run_scripts(
    root: Path, tag: str, extra: Sequence[str] = (), sample: int = 0, grep: str | None = None
) -> TagReport:
    report = TagReport(tag)
    scripts = [s for s in shell_scripts(root) if grep is None or re.search(grep, s.read_text(errors="replace"))]
    for script in evenly_spaced(scripts, sample):
        report.scripts += 1
        # As a user runs them from verl's root: `$(pwd)` is the root, and the variables they set have values.
        for launch in read_launches(
            script, cwd=str(root), unset_as_empty=True, stand_in=mark_variable, with_unsupported=True
        ):
            if launch.unsupported is not None:  # marked by the migration: a trainer rlbridge lacks
                report.outcomes.append((launch, Outcome("fails", f"entrypoint: {launch.unsupported}")))
                continue
            if launch.not_expanded is not None:
                report.outcomes.append((launch, Outcome("not expanded", launch.not_expanded)))
                continue
            argv, variables = fill_user_variables(launch.argv)
            broken = broken_on_verl(launch.argv, root, script.read_text(errors="replace"))
            if broken is not None:
                report.broken[len(report.outcomes)] = broken
            report.user_variables.update(variables)
            report.launches_with_user_variables += bool(variables)
            argv = replace_paths(argv, STAND_INS["model"], STAND_INS["train"], STAND_INS["val"])
            with run_from(root):
                outcome = dry_run([*argv, *extra])
            if broken is None and tag in _tag_names():
                broken = _unknown_to_verl(outcome, argv, root, tag)
                if broken is not None:
                    report.broken[len(report.outcomes)] = broken
            report.outcomes.append((launch, outcome))
    return report


_UNKNOWN_KEY = re.compile(r"^unknown config key '([\w.]+)'")


def _unknown_to_verl(outcome: Outcome, argv: Sequence[str], root: Path, tag: str) -> str | None:
    """A key rlbridge calls unknown that the launch sets without `+` and that verl's configs of the tag
    lack as well (neither verl's trainer configs, per the key table, nor any YAML of the tree defines
    it): Hydra refuses to override a key the composed config lacks, so verl stops too. The migration
    renames only keys it knows, to keys rlbridge has, so such a key is the script's as written. Not
    judged where the tree has a submodule (a recipe's config there may define it)."""
    match = _UNKNOWN_KEY.match(outcome.reason) if outcome.kind == "fails" else None
    if match is None or _submodules(root):
        return None
    key = match.group(1)
    if f"{key}=" not in {token.partition("=")[0] + "=" for token in argv}:  # added with '+', or from YAML
        return None
    if tag in verl_keys().get(key, {}).get("tags", ()) or _defined_in_a_yaml(key, root):
        return None
    return f"sets {key}, which verl's configs at this tag lack, without '+' (Hydra refuses to override it)"


@functools.lru_cache(maxsize=1)
def _tag_names() -> frozenset[str]:
    """The tags the key table was generated from (it knows verl's keys of these only)."""
    import json

    from shims.verl_keys import verdicts

    table = Path(verdicts.__file__).with_name("verl_keys.json")
    return frozenset(json.loads(table.read_text())["tags"])


def _defined_in_a_yaml(key: str, root: Path) -> bool:
    """Whether a YAML of the tree defines the key, whole or as the tail a config group's file would
    (`policy_loss.clip_cov_ratio` in a file of the actor group)."""
    parts = key.split(".")
    return any(".".join(parts[index:]) in _yaml_keys(str(root)) for index in range(len(parts)))


@functools.lru_cache(maxsize=4)
def _yaml_keys(root: str) -> frozenset[str]:
    import yaml

    found: set[str] = set()
    for file in Path(root).rglob("*.y*ml"):
        try:
            data = yaml.safe_load(file.read_text(errors="replace"))
        except (yaml.YAMLError, OSError):
            continue
        found |= set(_dotted(data))
    return frozenset(found)


def _dotted(data, prefix: str = "") -> Iterator[str]:
    if isinstance(data, dict):
        for name, value in data.items():
            yield f"{prefix}{name}"
            yield from _dotted(value, f"{prefix}{name}.")


def evenly_spaced(scripts: list[Path], count: int) -> list[Path]:
    """`count` scripts spread evenly over the sorted list (all of them when `count` is 0 or larger)."""
    if not count or count >= len(scripts):
        return scripts
    return [scripts[index * len(scripts) // count] for index in range(count)]


@contextlib.contextmanager
def run_from(root: Path) -> Iterator[None]:
    """As verl's scripts run, from verl's root with the checkout on the path (verl installs editable):
    relative paths (reward files, `--config-path`) are the root's, and `_target_: recipe.x.Loop`
    imports. Only `examples/` and `recipe/` are here, so code that imports `verl` itself still fails.
    Modules imported from the root are forgotten afterwards, so the next tag's copy is imported afresh."""
    sys.path.insert(0, str(root))
    try:
        with contextlib.chdir(root):
            yield
    finally:
        sys.path.remove(str(root))
        forgotten = {name for name, module in list(sys.modules.items()) if _imported_from(module, str(root))}
        # A submodule left behind its forgotten package breaks the next import of that package.
        forgotten |= {name for name in list(sys.modules) if any(name.startswith(f"{p}.") for p in forgotten)}
        for name in forgotten:
            sys.modules.pop(name, None)


def _imported_from(module, root: str) -> bool:
    """Whether `module` (or the package) was loaded from under `root`."""
    if str(getattr(module, "__file__", None) or "").startswith(root):
        return True
    try:
        return any(str(p).startswith(root) for p in getattr(module, "__path__", None) or ())
    except TypeError:  # torch.classes and its like answer any attribute, __path__ included, with an object
        return False


def run_tag(verl: Path, tag: str | None, mode: str, sample: int = 0, grep: str | None = None) -> TagReport:
    label = tag or str(verl)
    with scripts_of(verl, tag) as root:
        if mode == "v0":
            return dry_run_scripts(root, label, ["trainer.use_v1=false"], sample, grep)
        with tempfile.TemporaryDirectory(prefix="verl-migrated-") as tmp:
            report = dry_run_scripts(migrate_copy(root, Path(tmp)), label, sample=sample, grep=grep)
    return report


def format_report(reports: Sequence[TagReport], mode: str, show: int, where: bool = False) -> str:
    lines = [f"mode {mode}"]
    for report in reports:
        lines.append(
            f"{report.tag}: {report.scripts} scripts, {len(report.outcomes)} launches, "
            f"{len(report.broken)} broken as written (verl cannot run them either); of the "
            f"{len(report.runnable())} verl runs: {report.count('passes')} passed, {report.count('fails')} "
            f"failed, {report.count('not expanded')} not expanded, {report.count('traceback')} tracebacks; "
            f"accepted {report.acceptance:.1%}"
        )
        for reason, count in report.broken_reasons().most_common():
            lines.append(f"    {count:4d}  broken as written: {reason}")
            if where:
                lines.append(f"          in {', '.join(report.broken_where(reason))}")
        missing = report.missing_modules()
        if missing:
            lines.append(
                f"    ({sum(missing.values())} refusals import a module not installed here: "
                f"{', '.join(f'{name} x{count}' for name, count in missing.most_common())})"
            )
        if report.launches_with_user_variables:
            common = ", ".join(f"${name}" for name, _ in report.user_variables.most_common(8))
            lines.append(
                f"    ({report.launches_with_user_variables} launches use variables the user sets, given "
                f"typical values: {common}{', ...' if len(report.user_variables) > 8 else ''})"
            )
        for reason, count in report.reasons().most_common(show):
            lines.append(f"    {count:4d}  {reason}")
            if where:
                lines.append(f"          in {', '.join(report.where(reason))}")
    lines.append(
        "tag | scripts | launches | broken as written | verl runs | passed | failed | not expanded | "
        "tracebacks | accepted (passed / verl runs)"
    )
    lines += [
        f"{r.tag} | {r.scripts} | {len(r.outcomes)} | {len(r.broken)} | {len(r.runnable())} | "
        f"{r.count('passes')} | {r.count('fails')} | {r.count('not expanded')} | {r.count('traceback')} | "
        f"{r.acceptance:.1%}"
        for r in reports
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verl", type=Path, help="a verl checkout or a bare git mirror of verl")
    parser.add_argument("--tags", nargs="+", default=list(DEFAULT_TAGS), help="tags to read from a bare mirror")
    parser.add_argument(
        "--mode",
        choices=("v1", "v0"),
        default="v1",
        help="v1: migrate, then dry-run as written; v0: unchanged, with trainer.use_v1=false",
    )
    parser.add_argument("--show", type=int, default=30, help="how many refusal groups to list per tag")
    parser.add_argument("--where", action="store_true", help="name the script and line of each refused launch")
    parser.add_argument(
        "--sample",
        type=int,
        default=0,
        help="per tag, only this many scripts, spread evenly over the sorted list (0: all)",
    )
    parser.add_argument("--grep", help="only the scripts whose text matches this regular expression")
    args = parser.parse_args(argv)
    if not args.verl.exists():
        parser.error(f"no such folder: {args.verl}")
    tags = args.tags if is_bare_mirror(args.verl) else [None]
    reports = [run_tag(args.verl, tag, args.mode, args.sample, args.grep) for tag in tags]
    print(format_report(reports, args.mode, args.show, args.where))
    return 1 if any(r.count("traceback") for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())

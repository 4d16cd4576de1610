"""The suite's LightningCLI: the class both `cli.py` and the sweep engine's parse-only check use.

It lives here, not in `cli.py`, so that nothing under `experiments/` imports the entry point.

A mistake in what a run asks for (a bad value or combination, an unknown or abbreviated key, a missing
or corrupt data file) ends the command with two lines on stderr, a usage hint and
`error: <key>: <what is wrong and how to fix it>` (`lit_modules.config_messages` writes it), and exit status 2;
`SUITE_DEBUG=1` raises it with its full traceback instead.
"""

from __future__ import annotations

import logging
import os
import sys
from argparse import ArgumentError
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from contract.disk import disk_full
from contract.run_folder import SWEEP_DIR_VAR
from lit_modules.averaging import WeightAverage
from lit_modules.callbacks import DivergenceGuard, FinalStep, RunMetadata, SaveWhenStopped
from lit_modules.config_messages import (
    INSTANTIATION_ERRORS,
    as_config_error,
    check_arguments,
    class_keys,
    explain_parse_error,
    option_keys,
)
from lit_modules.diagnostics_callbacks import Diagnostics, LossSpikes
from lit_modules.plugin_args import PLUGINS_KEY, plugin_names
from lit_modules.progress import LineProgress, wants_lines
from lit_modules.sharded_checkpoints import consolidated, is_sharded_checkpoint
from lit_modules.sharding import STRATEGY_NAME as FSDP2  # (importing it registers `--trainer.strategy=fsdp2`)
from lit_modules.step_time import StepTime
from lit_modules.trainer_paths import checkpoint_run
from models.config import ConfigError, plugin_settings
from models.finetune import check_checkpoint_file
from models.plugins import load_plugins

# Values a DataModule decides and a model needs; each is read if the DataModule has it.
DATA_INFO_KEYS = (
    "vocab_size",
    "seq_len",
    "max_len",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "mask_token_id",
    "special_token_ids",
    "num_classes",
    "image_size",
    "in_channels",
    "train_max_len",
)
# `ckpt_path` values Lightning resolves itself rather than reading a file of that name
CHECKPOINT_ALIASES = ("last", "best", "hpc", "registry")
# where Lightning's info lines come from (rank_zero_info): seed, devices, tips, why fit stopped
LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
DEBUG_VAR = "SUITE_DEBUG"  # set (to anything): a configuration error raises with its traceback
SUBCOMMANDS = ("fit", "validate", "test", "predict")


def describe_data(datamodule: pl.LightningDataModule) -> dict[str, Any]:
    # plain ints: a value the parser checked (jsonargparse.typing.PositiveInt) is an int subclass, which a
    # checkpoint's hyperparameters would pickle as a class that torch.load(weights_only=True) refuses
    info = {key: getattr(datamodule, key) for key in DATA_INFO_KEYS if hasattr(datamodule, key)}
    return {k: int(v) if isinstance(v, int) and type(v) not in (int, bool) else v for k, v in info.items()}


class SuiteArgumentParser(LightningArgumentParser):
    """The CLI's parser. An abbreviated key is an error, not a silent expansion: `--trainer.max_step 5`
    would run as max_steps and stay misspelt in a sweep's records. jsonargparse builds the nested
    parsers of `--model.*` and `--data.*` with this same class, so they refuse abbreviations too.
    Errors are raised rather than printed with the 50-line usage, so `cli_main` can say them briefly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("exit_on_error", False)
        super().__init__(*args, **kwargs)


class SuiteCLI(LightningCLI):
    usage_command: str | None = None  # the command a usage hint names (a tool built on this CLI sets its own)

    def add_arguments_to_parser(self, parser) -> None:
        # read before the parser is built (`cli_main`: the plugins register their names); kept in config.yaml,
        # so a resumed run imports them again
        parser.add_argument(
            f"--{PLUGINS_KEY}",
            type=list[str] | str | None,
            default=None,
            help="plugin modules registering variants of an axis (models.plugins): a .py path or a module name",
        )
        # Linked when the DataModule is built (the vocabulary exists only then); the same link
        # runs again when a saved config.yaml is re-run, so the run is reproduced exactly.
        parser.link_arguments("data", "model.init_args.data_info", compute_fn=describe_data, apply_on="instantiate")
        parser.add_lightning_class_args(DivergenceGuard, "divergence")
        parser.add_lightning_class_args(RunMetadata, "run_metadata")
        parser.add_lightning_class_args(Diagnostics, "diagnostics")  # --diagnostics.every_n_steps 0: off
        parser.add_lightning_class_args(LossSpikes, "loss_spikes")
        parser.add_lightning_class_args(WeightAverage, "averaging")  # --averaging.kind ema|uniform (default none)

    def parse_arguments(self, parser, args) -> None:
        try:
            super().parse_arguments(parser, args)
        except ArgumentError as err:
            words = _words(args)
            raise ConfigError(explain_parse_error(err, lambda where, cls: self._known_keys(words, where, cls))) from err

    # private (lit_modules.private_api, with the Lightning versions it is known in)
    def _parse_ckpt_path(self) -> None:
        # the files the run will read, before Lightning reads the checkpoint here and anything is built
        config = self.config.get(self.config.get("subcommand") or "", self.config)
        ckpt_path = config.get("ckpt_path")
        if ckpt_path and ckpt_path not in CHECKPOINT_ALIASES:
            check_checkpoint_file(ckpt_path, "ckpt_path")
            # a sharded run's checkpoint folder, evaluated or predicted on one unsharded process: its consolidation
            if self.config.get("subcommand") != "fit" and is_sharded_checkpoint(ckpt_path) and not _shards(config):
                config["ckpt_path"] = str(consolidated(ckpt_path))
        # only training reads init_from (evaluating a run reads its own checkpoint; the start may be gone);
        # a folder is a reference model's, which read_weights checks
        init_args = (config.get("model") or {}).get("init_args", {})
        init_from = init_args.get("init_from")
        if self.config.get("subcommand") == "fit" and init_from and not Path(init_from).is_dir():
            check_checkpoint_file(init_from, "model.init_from")
        variants = plugin_settings(init_args.get("arch"))
        if init_from and Path(init_from).is_dir() and variants:  # a reference model's folder
            raise ConfigError(
                f"model.init_from: {init_from} is a reference model, but {'; '.join(variants)} has no equivalent in "
                "any reference family; start from a suite checkpoint, or use a built-in variant"
            )
        # Lightning re-parses a checkpoint's hyperparameters here, expecting a parser that exits
        try:
            super()._parse_ckpt_path()
        except ArgumentError as err:
            message = explain_parse_error(err, lambda where, cls: [])
            raise ConfigError(f"ckpt_path: the checkpoint's hyperparameters do not parse: {message}") from err

    def _known_keys(self, words: list[str], where: str, class_path: str | None) -> list[str]:
        """Every key of the (sub)command the words name, and of the class at `where` (`model`, `data`)."""
        # `_subcommand_parsers`: private (lit_modules.private_api); without it, the top-level parser's keys
        subcommand = next((w for w in words if w in SUBCOMMANDS), None)
        parser = getattr(self, "_subcommand_parsers", {}).get(subcommand, self.parser)
        nested = [f"{where}.{key}" for key in class_keys(class_path)] if where and class_path else []
        return option_keys(parser) + nested

    def before_instantiate_classes(self) -> None:
        if self.subcommand and self.subcommand != "fit":
            # the log folder's config.yaml re-runs the training (a sweep's runs log into their own
            # folder): a validate/test/predict there keeps its config beside it, named for itself
            self.save_config_kwargs = self.save_config_kwargs | {"config_filename": f"{self.subcommand}_config.yaml"}
        config = self.config.get(self.subcommand) if self.subcommand else self.config
        run = checkpoint_run(config.get("ckpt_path")) if self.subcommand == "predict" else None
        if run is not None:
            # a predict logs no metric: without a logger it leaves no events file in the run (nor a new version
            # folder holding only one), and its config lands beside the predictions it writes there
            config.trainer.logger, config.trainer.default_root_dir = False, str(run)
        for group in ("model", "data"):
            check_arguments(config, group)

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except INSTANTIATION_ERRORS as err:
            error = as_config_error(err)
            if error is None:
                raise
            raise error from err

    # private (lit_modules.private_api)
    def _run_subcommand(self, subcommand: str) -> None:
        # Some DataModules read (and check) their files only in prepare_data/setup; what a DataModule
        # raises there is the user's to fix (a missing or corrupt file). Any other error keeps its traceback,
        # but a full disk, which `cli.py` says in one line, naming the run's folder when the write named no file.
        try:
            super()._run_subcommand(subcommand)
        except Exception as err:
            full = disk_full(err)
            if full is not None and full.filename is None:  # a write that names no file (TensorBoard's events)
                folder = Path(self.trainer.log_dir or self.trainer.default_root_dir)
                raise OSError(full.errno, full.strerror, str(folder)) from err
            error = as_config_error(err, only="data") if isinstance(err, INSTANTIATION_ERRORS) else None
            if error is None:  # a full disk among them: `cli.py` says it in one line
                raise
            raise error from err

    # private (lit_modules.private_api)
    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> pl.Trainer:
        if in_sweep() and config.get("enable_model_summary") is None:  # a sweep's runs: on only when asked
            config = {**config, "enable_model_summary": False}
        # Lightning draws a live bar unless a ProgressBar is among the callbacks; in a log file its
        # redraws are thousands of partial lines, so there LineProgress takes its place. Chosen here,
        # not in the config: a saved config.yaml re-runs the same in a terminal and in a log.
        listed = config.get("callbacks") or []
        listed = [*callbacks, *(listed if isinstance(listed, list) else [listed])]
        bar_on = config.get("enable_progress_bar") is not False and not config.get("barebones")
        if bar_on and wants_lines() and not any(isinstance(c, ProgressBar) for c in listed):
            callbacks = [*callbacks, LineProgress()]
        if in_sweep():  # the sweep resumes a stopped run from last.ckpt: save it where the run stops
            callbacks = [*callbacks, SaveWhenStopped()]
        # the metrics and last.ckpt of the last step (not of the last interval's); run.json's step time
        callbacks = [*callbacks, FinalStep(), StepTime()]
        return super()._instantiate_trainer(config, callbacks)


def _words(args: Any) -> list[str]:
    """The command-line words of `args` (`sys.argv` when None; none for a dict or Namespace)."""
    if args is None:
        return sys.argv[1:]
    return [str(a) for a in args] if isinstance(args, (list, tuple)) else []


def usage_hint(words: list[str], command: str | None = None) -> str:
    """argparse's usage line for `words`: the subcommand they name, or `command` (a tool's, e.g. `cli.py prepare`)."""
    subcommand = next((w for w in words if w in SUBCOMMANDS), None)
    command = command or (f"cli.py {subcommand}" if subcommand else "cli.py {fit,validate,test,predict}")
    helped = command if command != "cli.py {fit,validate,test,predict}" else "cli.py"
    # a model's and a DataModule's keys are listed by their class's help, not by `fit --help` (subclass mode)
    classes = "; --model.help CausalLM: a model's keys" if subcommand else ""
    keys = f"{helped} --help: the keys{classes}; {DEBUG_VAR}=1: traceback"
    return f"usage: {command} [-c CONFIG.yaml ...] [--KEY VALUE ...]  ({keys})"


def in_sweep() -> bool:
    """Whether this run is one of a sweep's (the sweep engine sets its folder in the environment)."""
    return bool(os.environ.get(SWEEP_DIR_VAR))


class _NoAdverts(logging.Filter):
    """Drops Lightning's tips for its hosted services (`💡 Tip: ... litlogger / litmodels`), printed by every run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


def cli_main(args: list[str] | None = None, run: bool = True, cli_class: type[SuiteCLI] = SuiteCLI) -> SuiteCLI:
    """Builds the suite's CLI; `cli_class` lets a tool reuse these settings (the sweep's parse-only check).

    A sweep's run is quiet: its progress lines and errors, without Lightning's notes (seed, devices, tips,
    why training stopped: run.json records them) or the model summary (`trainer.enable_model_summary: true`
    brings it back), so that a sweep's output, `make demo`'s among them, is what a user reads.

    Raises:
        SystemExit: 2, after a usage hint and `error: <key>: <message>` on stderr, for a `ConfigError`
            (unless `SUITE_DEBUG` is set: then the error itself, with its traceback).
    """
    if in_sweep():
        for name in LIGHTNING_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    # on the logger that emits them (`rank_zero_info`'s): a parent logger's filters miss what its children log
    for emitter in (logging.getLogger(f"{name}.utilities.rank_zero") for name in LIGHTNING_LOGGERS):
        if not any(isinstance(f, _NoAdverts) for f in emitter.filters):
            emitter.addFilter(_NoAdverts())
    try:
        load_plugins(plugin_names(_words(args)))
        return cli_class(
            pl.LightningModule,
            pl.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            args=args,
            run=run,
            parser_class=SuiteArgumentParser,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            trainer_defaults={
                "logger": {
                    "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                    "init_args": {"save_dir": "runs", "default_hp_metric": False},
                },
                # the DataModules shard their own batches over processes (datamodules.sampling.RankSlices,
                # RoundRobinBatches): the same global batches as one process, every evaluation example once
                "use_distributed_sampler": False,
                # every family's training: step-budgeted (validation by `val_check_interval` steps, not epochs),
                # clipped, and deterministic on CPU (a run is a function of its seed)
                "check_val_every_n_epoch": None,
                "gradient_clip_val": 1.0,
                "deterministic": True,
            },
        )
    except ConfigError as err:
        if os.environ.get(DEBUG_VAR):
            raise
        # two lines, usage then error (argparse's order): the whole message is both its first and last lines
        print(usage_hint(_words(args), cli_class.usage_command), file=sys.stderr)
        print("error: " + " ".join(str(err).split()), file=sys.stderr)
        raise SystemExit(2) from None


def _shards(config: Any) -> bool:
    """Whether the command's trainer shards the model (`--trainer.strategy=fsdp2`): it loads a checkpoint's shards."""
    strategy = (config.get("trainer") or {}).get("strategy")
    return strategy == FSDP2 or "ShardedDataParallel" in str(getattr(strategy, "class_path", strategy) or "")

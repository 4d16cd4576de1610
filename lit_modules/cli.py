"""The suite's LightningCLI: the class both `cli.py` and the sweep engine's parse-only check use.

It lives here, not in `cli.py`, so that nothing under `experiments/` imports the entry point.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.cli import LightningCLI

from lit_modules.callbacks import DivergenceGuard, RunMetadata

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


def describe_data(datamodule: pl.LightningDataModule) -> dict[str, Any]:
    return {key: getattr(datamodule, key) for key in DATA_INFO_KEYS if hasattr(datamodule, key)}


class SuiteCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        # Linked when the DataModule is built (the vocabulary exists only then); the same link
        # runs again when a saved config.yaml is re-run, so the run is reproduced exactly.
        parser.link_arguments("data", "model.init_args.data_info", compute_fn=describe_data, apply_on="instantiate")
        parser.add_lightning_class_args(DivergenceGuard, "divergence")
        parser.add_lightning_class_args(RunMetadata, "run_metadata")


def cli_main(args: list[str] | None = None, run: bool = True, cli_class: type[SuiteCLI] = SuiteCLI) -> SuiteCLI:
    """Builds the suite's CLI; `cli_class` lets a tool reuse these settings (the sweep's parse-only check)."""
    return cli_class(
        pl.LightningModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        run=run,
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
        },
    )

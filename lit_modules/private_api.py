"""Every private name of Lightning, jsonargparse and argparse the suite touches, in one table.

Private names may change in any release without notice: requirements.txt pins the versions they are known
in, and tests/lit_modules/test_private_api.py fails, naming the entry, when the installed library lacks one
(or an overridden method's parameters differ), and when the code touches a private name this table lacks.
Torch's and the standard library's private names the suite uses are listed in that test.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrivateName:
    """A library's private attribute or method that the suite reads, calls or overrides.

    Args:
        owner: the library's class, as a dotted path (`lightning.pytorch.cli.LightningCLI`).
        name: the attribute (`_subcommand_parsers`).
        used_by: where the suite touches it, and why no public API serves.
        parameters: for a method the suite overrides, the parameters its override was written for.
    """

    owner: str
    name: str
    used_by: str
    parameters: tuple[str, ...] | None = None


CLI = "lightning.pytorch.cli.LightningCLI"
PRIVATE_NAMES: tuple[PrivateName, ...] = (
    # known to work with Lightning 2.6.0-2.6.6; added in 2.5.5, but before 2.6.0 it failed on a subclass-mode
    # model's hyperparameters, which every suite checkpoint has
    PrivateName(CLI, "_parse_ckpt_path", "SuiteCLI overrides it: the files a run reads are checked first", ("self",)),
    # the same signature since 2.5.0
    PrivateName(
        CLI, "_run_subcommand", "SuiteCLI overrides it: a DataModule's file error in one line", ("self", "subcommand")
    ),  # fmt: skip
    PrivateName(
        CLI,
        "_instantiate_trainer",
        "SuiteCLI overrides it: a sweep's quiet runs, progress lines in logs",
        ("self", "config", "callbacks"),
    ),  # fmt: skip
    # the same in 2.5.0-2.6.6; without it SuiteCLI._known_keys falls back to the top-level parser's keys
    PrivateName(CLI, "_subcommand_parsers", "SuiteCLI._known_keys: a subcommand's keys, to suggest one"),
    PrivateName(
        "argparse.ArgumentParser", "_option_string_actions", "errors.option_keys: a parser's keys, to suggest one"
    ),
    PrivateName(
        "lightning.pytorch.LightningModule", "_trainer", "TaskModule: the trainer, or None where `trainer` raises"
    ),
    # the same in 2.5.0-2.6.6: what the trainer sets around each hook it calls, and the cache `log` keeps of where
    # a module's metrics are; WeightAverage calls the averaged copy's evaluation hooks as the trainer would (its
    # `self.log` needs the hook's name), and the copy's cache came from another module (deepcopy)
    PrivateName(
        "lightning.pytorch.LightningModule",
        "_current_fx_name",
        "averaging.WeightAverage: the averaged copy's evaluation hooks log like the trainer's calls",
    ),
    # the step and the file of ModelCheckpoint's last save, the same since 2.0
    PrivateName(
        "lightning.pytorch.callbacks.ModelCheckpoint",
        "_last_global_step_saved",
        "callbacks.FinalStep: whether the periodic save ran at the last step (no public way to ask)",
    ),
    PrivateName(
        "lightning.pytorch.callbacks.ModelCheckpoint",
        "_last_checkpoint_saved",
        "callbacks.FinalStep: whether it saved at all (if not, its own on_train_end saves last.ckpt)",
    ),
    PrivateName(
        "lightning.pytorch.LightningModule",
        "_metric_attributes",
        "averaging.WeightAverage: the averaged copy's metric names, not the trained module's",
    ),
)

# the overridden methods' names and parameters
PRIVATE_OVERRIDES: dict[str, tuple[str, ...]] = {p.name: p.parameters for p in PRIVATE_NAMES if p.parameters}

"""Configuration errors in one line: what jsonargparse and the constructors raise, said as
`<key>: <what is wrong and how to fix it>` (`lit_modules.suite_cli` prints it with a usage hint).

jsonargparse reports a nested key's error inside its class's and its union's ("Parser key "model":
Does not validate against any of the Union subtypes ..."); a constructor's error comes wrapped the same
way. The chain of exceptions holds the full key and the original message; these functions read them.
"""

from __future__ import annotations

import difflib
import importlib
import re
import typing
from argparse import ArgumentError
from dataclasses import is_dataclass
from typing import Any

import lightning.pytorch as pl
from jsonargparse import ArgumentParser
from lightning.fabric.utilities.exceptions import MisconfigurationException
from torch import nn

from contract.disk import disk_full
from models.config import ArchConfig, ConfigError

# What a constructor raises for a bad argument, a missing or corrupt file, a device that is not there.
INSTANTIATION_ERRORS = (ValueError, OSError, MisconfigurationException)
# Whose frame such an error was raised in -> the key it is reported under (first match wins).
ERROR_PLACES: tuple[tuple[type, str], ...] = (
    (ArchConfig, "model.arch"),
    (pl.LightningDataModule, "data"),
    (nn.Module, "model"),
    (pl.Trainer, "trainer"),
)


def _chain(err: BaseException | None) -> list[BaseException]:
    """`err` and the exceptions it was raised from (or while handling), outermost first."""
    chain: list[BaseException] = []
    while err is not None and all(err is not seen for seen in chain):
        chain.append(err)
        err = err.__cause__ or err.__context__
    return chain


def option_keys(parser: ArgumentParser) -> list[str]:
    """The dotted keys a parser accepts on the command line (`trainer.max_steps`, ...); argparse's private
    `_option_string_actions` (lit_modules.private_api): argparse has no public list of a parser's options."""
    return [option[2:] for option in parser._option_string_actions if option.startswith("--")]


def class_keys(class_path: str) -> list[str]:
    """The keys of a class's arguments (`arch.d_model`, `optim.lr`, ...), for suggestions only."""
    module, _, name = class_path.rpartition(".")
    parser = ArgumentParser()
    try:
        parser.add_class_arguments(getattr(importlib.import_module(module), name))
    except Exception:  # a suggestion must never hide the error it comes with
        return []
    return option_keys(parser)


def did_you_mean(key: str, known: list[str]) -> str:
    """`; did you mean trainer.max_steps?` for a key that abbreviates, misspells or leaves off the groups of known
    ones (`max_steps`), else ''."""
    longer = [k for k in known if k.startswith(key)]
    leaf = [k for k in known if "." not in key and k.rsplit(".", 1)[-1] == key]
    close = longer or leaf or difflib.get_close_matches(key, known, n=3, cutoff=0.75)
    if not close:
        return ""
    note = " (keys are not abbreviated)" if longer else ""
    return f"; did you mean {' or '.join(sorted(close)[:3])}?{note}"


def _readable(message: str) -> str:
    """jsonargparse's innermost message in the suite's words: the value, then the valid choices."""
    literal = re.fullmatch(r"Expected a typing\.Literal\[(.*)\]\. Got value: (.*)", message, re.S)
    if literal:
        return f"{literal.group(2)!r} is not valid; choose one of {literal.group(1)}"
    restricted = re.fullmatch(r"(.*) does not conform to restriction v(>=?)0", message, re.S)  # jsonargparse.typing
    if restricted:
        return f"{restricted.group(1)} must be {'a positive integer' if restricted.group(2) == '>' else '0 or more'}"
    message = re.sub(r"<class '([\w.]+)'>", r"\1", message)
    expected = re.fullmatch(r"Expected an? (.*)\. Got value: (.*)", message, re.S)
    return f"expected {expected.group(1)}, got {expected.group(2)!r}" if expected else message


# the class a subclass-mode group has before any config names one: no keys of a model or a DataModule exist yet
UNSET_CLASSES = ("lightning.LightningModule", "lightning.LightningDataModule")


def explain_parse_error(err: ArgumentError, known_keys: typing.Callable[[str, str | None], list[str]]) -> str:
    """One line for a jsonargparse error: the dotted key, the problem, the fix.

    jsonargparse nests a nested key's error inside its class's and its union's (`Parser key "model":
    Does not validate against any of the Union subtypes ...`); the keys along the chain make the full
    key, and the innermost message says what is wrong.

    Args:
        err: the parser's error.
        known_keys: `(key, class_path) -> the keys that exist`, for suggesting one for an unknown key
            (`key` is where the unknown one sits, e.g. `model`, and `class_path` that group's class).
    """
    texts = [str(e).strip() for e in _chain(err)]
    keys = dict.fromkeys(m.group(1) for text in texts if (m := re.match(r'Parser key "([^"]+)"', text)))
    where = ".".join(keys)
    class_path = next((m.group(1) for text in texts if (m := re.search(r"class_path '([\w.]+)'", text))), None)
    message = texts[-1]
    unknown = re.fullmatch(r"unrecognized arguments: (.*)", message, re.S)
    names = [w.lstrip("-").split("=")[0] for w in unknown.group(1).split() if w.startswith("--")] if unknown else []
    # a key on the command line of a class; a key in a config file (`Group 'arch' does not accept option 'd_mode'`)
    option = re.fullmatch(r"Option '([^']+)' is not accepted", message)
    names += [option.group(1)] if option else []
    in_file = re.fullmatch(r"(?:Subcommand '[^']+'|Group '([^']+)') does not accept option '([^']+)'", message)
    names += [".".join(p for p in in_file.groups() if p)] if in_file else []
    if names:
        full = [f"{where}.{name}" if where else name for name in names]
        known = known_keys(where, class_path)
        line = "; ".join(f"{key}: unknown key{did_you_mean(key, known)}" for key in full)
        if class_path in UNSET_CLASSES:  # an overlay (tiny.yaml) without its base, which sets the class
            line += (f"; no {where} class is set, and its keys come with it: give the family's base config first, "
                     "-c configs/<family>/base.yaml -c <the overlay>")  # fmt: skip
        return line
    return f"{where}: {_readable(message)}" if where else _readable(message)


def check_arguments(config: Any, group: str) -> None:
    """Constructs the dataclass-typed arguments of `group`'s class (`model.arch`, `model.optim`), so that
    their cross-field checks (`n_heads` divides `d_model`) fail right after parsing, before any data is
    built, and in a sweep's parse-only check too; then the class's own `check_arguments` (a family's
    constraints, e.g. the positional schemes ViT has), where it has one.

    Raises:
        ConfigError: `<group>.<argument>: <the dataclass's message>`, or `<group>: <the class's message>`.
    """
    entry = config.get(group)
    init_args = entry.get("init_args") if entry is not None and "class_path" in entry else None
    if init_args is None:
        return
    module, _, name = entry.class_path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    try:
        hints = typing.get_type_hints(cls.__init__)
    except (NameError, TypeError):  # unresolvable annotations: instantiation will check
        return
    args = dict(vars(init_args))  # top level only: Namespace.items() flattens
    for arg, value in args.items():
        kind = hints.get(arg)
        if isinstance(kind, type) and is_dataclass(kind) and hasattr(value, "as_dict"):
            try:
                args[arg] = kind(**value.as_dict())
            except (TypeError, ValueError) as err:
                raise ConfigError(f"{group}.{arg}: {err}") from err
    try:
        getattr(cls, "check_arguments", lambda args: None)(args)
    except ValueError as err:
        raise ConfigError(f"{group}: {err}") from err


def _user_cause(err: BaseException) -> BaseException | None:
    """The error the suite's or a library's code raised to its caller (the outermost of the chain not
    raised inside jsonargparse, which wraps it), if it is one of `INSTANTIATION_ERRORS`; `None` for
    anything else (a bug: it keeps its traceback)."""
    for cause in _chain(err):
        tb = cause.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None and "jsonargparse" not in tb.tb_frame.f_code.co_filename:
            return cause if isinstance(cause, INSTANTIATION_ERRORS) else None
    return None


def _error_place(err: BaseException) -> str:
    """`model`, `data`, ...: whose code raised `err` (the innermost frame with a known `self`), or ''."""
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        owner = frame.f_locals.get("self")
        place = next((where for kind, where in ERROR_PLACES if isinstance(owner, kind)), None)
        if place:
            return place
    return ""


def as_config_error(err: BaseException, only: str | None = None) -> ConfigError | None:
    """`err` as a `ConfigError` saying where it arose (`data: <message>`), if a constructor's or a
    library's own check raised it (`_user_cause`) and, with `only`, in that place; else `None` (a full disk too)."""
    if disk_full(err) is not None:  # not the configuration's fault: `cli.py` says it in its own line
        return None
    cause = _user_cause(err)
    place = _error_place(cause) if cause is not None else ""
    if cause is None or only not in (None, place):
        return None
    return ConfigError(f"{place}: {cause}" if place else str(cause))

"""python -m course_lib.training --config NAME [--FIELD VALUE ...] [--model.FIELD VALUE ...]
[--resume PATH] [--export PATH]"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys

import torch

from course_lib.model import GPTConfig
from course_lib.training.checkpoint import CheckpointError
from course_lib.training.config import CONFIGS, TrainConfig, replace_model
from course_lib.training.loop import config_from_checkpoint, train

# Model fields that also have a flat flag, nanoGPT's spelling: --n_layer 4 is --model.n_layer 4.
FLAT_MODEL_FLAGS = ("block_size", "n_layer", "n_head", "n_kv_head", "n_embd", "dropout", "bias",
                    "pos_encoding", "activation")


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parse_optional_int(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def _model_flag_type(f: dataclasses.Field):
    if f.default is None:   # derived when None: n_kv_head = n_head, d_ff = 4 n_embd
        return _parse_optional_int, "INT|none"
    kind = type(f.default)
    return {bool: _parse_bool, int: int, float: float, str: str}[kind], kind.__name__.upper()


def build_parser() -> argparse.ArgumentParser:
    presets = "\n".join(
        f"  {name:30s} {c.model.n_layer} layers x {c.model.n_embd} wide, context "
        f"{c.model.block_size}, batch "
        f"{c.batch_size}, {c.max_iters} steps, lr {c.learning_rate:g}, device {c.device}"
        for name, c in CONFIGS.items())
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.training",
        description="Train a character-level GPT (lessons 07 and 10). Every TrainConfig field "
                    "can be overridden by name, e.g. --max_iters 500 --device cpu, and every "
                    "field of the model's GPTConfig with --model.FIELD, e.g. --model.n_kv_head 1 "
                    "--model.pos_encoding rope (--n_layer, --n_head, --n_embd, --block_size, ... "
                    "are short for --model.n_layer, ...).",
        epilog=f"presets (--config):\n{presets}\n\nunder torchrun the run is data-parallel "
               "(DDP): torchrun --standalone --nproc_per_node=N -m course_lib.training ...",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=sorted(CONFIGS), help="the preset to start from")
    parser.add_argument("--resume", metavar="PATH", help="continue from this checkpoint")
    parser.add_argument("--export", metavar="PATH",
                        help="at the end, write the model as a float16 pretrained file "
                             "(course_lib.pretrained) with its validation loss")
    for f in dataclasses.fields(TrainConfig):
        if f.name == "model":
            continue
        kind = {bool: _parse_bool, int: int, float: float, str: str}[type(f.default)]
        parser.add_argument(f"--{f.name}", type=kind, default=None, metavar=type(f.default).__name__.upper(),
                            help=f"(default from the preset; TrainConfig default {f.default!r})")
    group = parser.add_argument_group("model (course_lib.model.GPTConfig; vocab_size comes from the data)")
    for f in dataclasses.fields(GPTConfig):
        if f.name == "vocab_size":
            continue
        kind, metavar = _model_flag_type(f)
        flags = [f"--model.{f.name}"] + ([f"--{f.name}"] if f.name in FLAT_MODEL_FLAGS else [])
        group.add_argument(*flags, dest=f"model.{f.name}", type=kind, default=None,
                           metavar=metavar, help="(default from the preset)")
    return parser


def with_overrides(config: TrainConfig, overrides: dict) -> TrainConfig:
    """`config` with some fields changed, by the command line's names: "max_iters" for a
    TrainConfig field, "model.n_layer" for a field of its model (derived defaults follow)."""
    given = dict(overrides)
    model = {name.removeprefix("model."): given.pop(name) for name in list(given)
             if name.startswith("model.")}
    if model:
        given["model"] = replace_model(config.model, **model)
    return config.replace(**given)


def given_flags(args: argparse.Namespace) -> dict:
    """The fields the command line set (flat model flags are stored as model.FIELD)."""
    return {name: value for name, value in vars(args).items()
            if value is not None and name not in ("config", "resume", "export")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.config is None and args.resume is None:
            parser.error("give --config NAME (a preset) or --resume PATH")
        if args.config is not None:
            config = with_overrides(CONFIGS[args.config], given_flags(args))
        else:
            config = with_overrides(config_from_checkpoint(args.resume), given_flags(args))
        result = train(config, resume=args.resume)
    except (CheckpointError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if result.checkpoint_path is not None:
        last = result.history[-1]
        print(f"step {result.step}: train {last['train_loss']:.4f}, val {last['val_loss']:.4f} "
              f"(best {result.best_val_loss:.4f}); {result.elapsed:.1f} s; "
              f"{result.tokens_per_second:,.0f} tokens/s"
              + (f"; MFU {100 * result.mfu:.1f}%" if result.mfu is not None else "")
              + (f"; target reached at {result.target_reached_at:.1f} s"
                 if result.target_reached_at is not None else ""))
        print(f"checkpoint: {result.checkpoint_path}")
        if args.export:
            from course_lib.pretrained import export_pretrained
            device = torch.cuda.get_device_name() if result.device.startswith("cuda") else result.device
            info = export_pretrained(
                result.model, result.vocab, args.export,
                command="python -m course_lib.training " + shlex.join(argv),
                train_config=config.to_dict(), steps=result.step, trained_on=device)
            print(f"exported {args.export} ({info['bytes'] / 1e6:.2f} MB), validation loss "
                  f"{info['val_loss']:.4f}")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

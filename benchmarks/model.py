"""Measured (lesson 06): training throughput of course_lib.model.GPT against `transformers`'
GPT2LMHeadModel with the same config and the same weights (GPT.from_hf_gpt2), on CPU.

One step is forward + loss + backward on a (B, T) batch, float32, train mode with dropout 0;
the gradients are cleared between steps. Both models are checked to give the same loss first.
The peer is measured in the same rounds (benchmarks/attention.py's `measure`); the printed
ratio is our tokens/s over the peer's (>= 1.0: ours is not slower).

    python benchmarks/model.py            # the nanoGPT Shakespeare-char size and GPT-2 small
    python benchmarks/model.py --quick    # two small sizes, a few seconds
"""

from __future__ import annotations

import argparse
import platform

import torch
from attention import measure  # benchmarks/attention.py, next to this script

from course_lib.model import GPT

SIZES = {  # name: (GPT2Config kwargs, batch, seq_len)
    "char 6x384": (dict(vocab_size=65, n_positions=256, n_layer=6, n_head=6, n_embd=384), 4, 256),
    "gpt2-small": (dict(vocab_size=50257, n_positions=1024, n_layer=12, n_head=12, n_embd=768), 1, 256),
}
QUICK = {
    "tiny 2x64": (dict(vocab_size=65, n_positions=64, n_layer=2, n_head=4, n_embd=64), 8, 64),
    "small 4x128": (dict(vocab_size=65, n_positions=128, n_layer=4, n_head=4, n_embd=128), 4, 128),
}


def train_step(model, idx, targets, hf: bool):
    def step():
        model.zero_grad(set_to_none=True)
        loss = model(idx, labels=targets).loss if hf else model(idx, targets)[1]
        loss.backward()
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target-ms", type=float, default=1500.0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = QUICK if args.quick else SIZES
    if args.quick:
        args.rounds, args.target_ms = 2, 100.0
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers import __version__ as hf_version

    print(f"torch {torch.__version__}, transformers {hf_version}, {platform.machine()}, "
          f"{torch.get_num_threads()} threads; forward + backward, float32, dropout 0")
    print(f"{'size':<12} {'params':>12} {'B x T':>9} {'peer tok/s':>11} {'ours tok/s':>11} "
          f"{'ours / peer':>12}  peer attention")
    for name, (kwargs, B, T) in sizes.items():
        torch.manual_seed(0)
        hf_config = GPT2Config(**kwargs, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                               activation_function="gelu_new", bos_token_id=0, eos_token_id=0)
        peer = GPT2LMHeadModel(hf_config).train()
        ours = GPT.from_hf_gpt2(peer).train()
        idx = torch.randint(0, kwargs["vocab_size"], (B, T))
        targets = torch.randint(0, kwargs["vocab_size"], (B, T))
        # transformers shifts the labels itself; give it the targets one step to the right
        labels = torch.cat([idx[:, :1], targets], dim=1)[:, :T]
        peer_loss = peer(idx, labels=labels).loss.item()
        our_loss = ours(idx[:, :-1], targets[:, :-1])[1].item()
        if abs(peer_loss - our_loss) > 1e-4:
            raise SystemExit(f"{name}: the losses differ ({peer_loss} vs {our_loss}); not comparable")
        timing = measure({"peer": train_step(peer, idx, labels, hf=True),
                          "ours": train_step(ours, idx, targets, hf=False)},
                         args.rounds, args.target_ms / 1000)
        peer_s, ours_s, ratio = timing["peer"][0], timing["ours"][0], timing["ours"][1]
        print(f"{name:<12} {ours.num_params():>12,} {f'{B}x{T}':>9} {B * T / peer_s:>11,.0f} "
              f"{B * T / ours_s:>11,.0f} {1 / ratio:>11.2f}x  {peer.config._attn_implementation}")


if __name__ == "__main__":
    main()

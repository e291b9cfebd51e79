"""Serve the shipped character-level GPT over an OpenAI-compatible HTTP API.

    python -m course_lib.serving [--host 127.0.0.1] [--port 8000] [--block-size 16] [--num-blocks N]
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> None:
    try:
        import uvicorn

        from course_lib.serving.server import DEFAULT_MODEL_NAME, create_app
    except ImportError as error:
        sys.exit(f"python -m course_lib.serving needs starlette and uvicorn ({error}): "
                 "pip install -e '.[serve]'")
    parser = argparse.ArgumentParser(
        prog="python -m course_lib.serving",
        description="Serve the shipped character-level GPT (shakespeare_char) with continuous batching "
                    "over an OpenAI-compatible API: GET /v1/models, POST /v1/completions.")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every "
                             "interface)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port to listen on (default 8000)")
    parser.add_argument("--block-size", type=int, default=16,
                        help="token slots per KV-cache block (default 16)")
    parser.add_argument("--num-blocks", type=int, default=None,
                        help="KV-cache blocks in each layer's pool (default: as many as 256 MiB hold); a small "
                             "pool queues or preempts requests, it never changes their tokens")
    parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME,
                        help=f"the name clients pass as \"model\" (default {DEFAULT_MODEL_NAME!r})")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be in 0..65535, got {args.port}")

    from course_lib.model import load_pretrained
    from course_lib.serving.engine import Engine

    model, vocab, *_ = load_pretrained("shakespeare_char")
    try:
        engine = Engine(model, block_size=args.block_size, num_blocks=args.num_blocks)
    except ValueError as error:
        parser.error(str(error))
    app = create_app(engine, vocab, model_name=args.model_name)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"serving {args.model_name!r} at http://{host}:{args.port}/v1 "
          f"({engine.cache.num_blocks} KV blocks of {engine.cache.block_size} tokens); Ctrl-C stops it",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()

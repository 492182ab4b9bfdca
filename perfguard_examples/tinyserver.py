"""Serve the example GGUF model (``perfguard_examples.tinygguf``) with llama.cpp's server.

    python -m perfguard_examples.tinyserver [--layers 2] [--hidden 64] [--ffn 128]
        [--seed 0] [--precision fp32|fp16|int8]
        -- [llama_cpp.server options: --port P --n_threads N --embedding True ...]

Writes the model once per shape into the system's temporary folder (a scratch file
renamed into place, so concurrent servers share it safely) and then ``exec``s
``python -m llama_cpp.server --model THAT.gguf --model_alias ITS-NAME OPTIONS`` (the served
model's id is the file's name, not its temporary path): the process perfguard started
*is* llama.cpp's server. With a real model, a suite runs the server directly:
``[python, -m, llama_cpp.server, --model, model.gguf, --port, "{port}"]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from perfguard_examples.tinygguf import PRECISIONS, write

#: The file layout's version, in the written file's name: a model file of an older
#: perfguard_examples left in the temporary folder is never served in its place.
FORMAT = 2


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--ffn", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32")
    args, server = parser.parse_known_args(argv)
    if server[:1] == ["--"]:
        server = server[1:]
    folder = Path(tempfile.gettempdir()) / "perfguard-tinygguf"
    folder.mkdir(exist_ok=True)
    name = (
        f"tiny-v{FORMAT}-l{args.layers}-h{args.hidden}-f{args.ffn}-s{args.seed}-"
        f"{args.precision}.gguf"
    )
    model = folder / name
    if not model.exists():
        write(
            model, layers=args.layers, hidden=args.hidden, ffn=args.ffn, seed=args.seed,
            precision=args.precision,
        )  # fmt: skip
    if "--model_alias" not in server:  # its id in /v1/models: the same on every machine
        server = ["--model_alias", model.stem, *server]
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), *server]
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main(sys.argv[1:])

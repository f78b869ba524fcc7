#!/usr/bin/env python3
"""Writes a tiny llama-architecture GGUF with random weights, for timing a real
llama-server without downloading any weights.

The text it generates is gibberish; its prefill, decode, KV cache and prefix
reuse are real. The tokenizer (every ``tokenizer.*`` key) is copied from the
llama.cpp snapshot's own ``models/ggml-vocab-llama-spm.gguf`` (32,000 SPM
tokens), and the file is written with that snapshot's ``gguf-py``.

Usage: make_model.py LLAMA_CPP_DIR OUT.gguf [--layers 2] [--hidden 768]
       [--ff 2048] [--heads 12] [--ctx 8192] [--seed 1]

Needs numpy (and PyYAML, which gguf-py imports). gguf-py imports
``sentencepiece`` at import time for its vocab converters, which this script
does not use: when the module is missing, an empty stand-in is registered.
"""
import argparse
import sys
import types
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("llama_cpp_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--ff", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    vocab_file = args.llama_cpp_dir / "models" / "ggml-vocab-llama-spm.gguf"
    gguf_py = args.llama_cpp_dir / "gguf-py"
    if not vocab_file.is_file() or not gguf_py.is_dir():
        print(f"make_model: {args.llama_cpp_dir} is not a llama.cpp source directory "
              f"(expected {vocab_file} and {gguf_py})", file=sys.stderr)
        return 2
    if args.hidden % args.heads != 0:
        print(f"make_model: --hidden {args.hidden} is not a multiple of --heads {args.heads}", file=sys.stderr)
        return 2
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = object  # only gguf-py's vocab converters use it
        sys.modules["sentencepiece"] = stub
    sys.path.insert(0, str(gguf_py))
    import numpy as np
    import gguf

    reader = gguf.GGUFReader(str(vocab_file))
    n_vocab = None
    writer = gguf.GGUFWriter(str(args.out), "llama")
    writer.add_name("request-routing-sim random llama")
    writer.add_context_length(args.ctx)
    writer.add_embedding_length(args.hidden)
    writer.add_block_count(args.layers)
    writer.add_feed_forward_length(args.ff)
    writer.add_head_count(args.heads)
    writer.add_head_count_kv(args.heads)
    writer.add_rope_dimension_count(args.hidden // args.heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            item = field.types[1]
            if item == gguf.GGUFValueType.STRING:
                value = [bytes(field.parts[i]) for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
            writer.add_array(name, value)
        elif vtype == gguf.GGUFValueType.STRING:
            writer.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            writer.add_key_value(name, field.parts[field.data[0]].tolist()[0], vtype)
    if n_vocab is None:
        print(f"make_model: {vocab_file} has no tokenizer.ggml.tokens", file=sys.stderr)
        return 2

    rng = np.random.default_rng(args.seed)
    h, ff = args.hidden, args.ff

    def weight(rows: int, cols: int) -> "np.ndarray":
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    writer.add_tensor("token_embd.weight", weight(n_vocab, h))
    writer.add_tensor("output_norm.weight", np.ones(h, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, h))
    for i in range(args.layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(h, dtype=np.float32))
        for part in ("q", "k", "v", "output"):
            writer.add_tensor(f"blk.{i}.attn_{part}.weight", weight(h, h))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(h, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ff, h))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(ff, h))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(h, ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"make_model: wrote {args.out} ({args.layers} layers, hidden {h}, ff {ff}, {args.heads} heads, "
          f"vocab {n_vocab}, f16)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

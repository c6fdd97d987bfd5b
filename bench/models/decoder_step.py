#!/usr/bin/env python3
"""Export one decoding step of a language model with a key/value cache.

Hugging Face's causal language models (transformers, seeded random weights),
exported at opset 17 as one step: the new token against the cache of the
past ones, so every product has one row and a run reads every weight once
(a benchmark of how fast an engine streams its weights).

  gpt2   GPT2LMHeadModel with GPT-2 small's sizes: 12 layers, hidden 768, 12
         heads, vocabulary 50257 (about 650 MB). Inputs input_ids [1, 1] and
         past_<layer>_k / _v [1, 12, past, 64].
  llama  LlamaForCausalLM: 8 layers, hidden 1024, 16 heads, FFN 2816,
         vocabulary 32000 (about 675 MB). Inputs input_ids [1, 1],
         attention_mask [1, total] (total = past + 1), position_ids [1, 1]
         and past_<layer>_k / _v [1, 16, past, 64].

Outputs: the logits, then each layer's present key and value. `past` and
`total` stay symbolic.

    build/venv/bin/python bench/models/decoder_step.py /tmp/gpt2_step.onnx
    build/venv/bin/python bench/compare /tmp/gpt2_step.onnx --dim past=127 --threads 1,2 --cycles 5 --iters 20
    build/venv/bin/python bench/models/decoder_step.py /tmp/llama_step.onnx --arch llama
    build/venv/bin/python bench/compare /tmp/llama_step.onnx --dim past=127 --dim total=128 \
        --threads 1,2 --cycles 5 --iters 20

(bench/compare feeds integer inputs of 0 and 1: LLaMA's mask then hides
some past positions and its position id is 0 or 1, which changes no cost.)
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "models"))
import export_sequence_models  # noqa: E402  (the decoding-step wrapper of the model tests)


def _count(low: int, high: int):
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low}-{high}")
        return value
    return parse


def _model(arch: str, layers: int | None):
    import transformers

    if arch == "gpt2":
        layers = layers or 12
        config = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024,
                                         use_cache=True)
        return transformers.GPT2LMHeadModel(config).eval(), layers, 12, 64, config.vocab_size, ()
    layers = layers or 8
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                      num_hidden_layers=layers, num_attention_heads=16, max_position_embeddings=2048,
                                      use_cache=True)
    return transformers.LlamaForCausalLM(config).eval(), layers, 16, 64, config.vocab_size, \
        ("attention_mask", "position_ids")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # Bad arguments: one line and exit 1, without argparse's usage block.
    parser.error = lambda message: sys.exit(f"decoder_step.py: error: {message}")
    parser.add_argument("output", help="the .onnx file to write")
    parser.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2")
    parser.add_argument("--layers", type=_count(1, 48),
                        help="transformer layers (1-48; default 12 for gpt2, 8 for llama)")
    parser.add_argument("--past", type=_count(1, 1023), default=127,
                        help="past length of the example inputs (the axis stays symbolic)")
    args = parser.parse_args(argv)
    if not Path(args.output).resolve().parent.is_dir():
        parser.error(f"no folder for {args.output}")

    import torch

    torch.manual_seed(20261207)
    model, layers, heads, head_dim, vocab, extra_names = _model(args.arch, args.layers)

    names = [f"{kind}_{layer}_{half}" for kind in ("past", "present") for layer in range(layers) for half in "kv"]
    past_names, present_names = names[:2 * layers], names[2 * layers:]
    extra = {"attention_mask": torch.ones(1, args.past + 1, dtype=torch.int64),
             "position_ids": torch.tensor([[args.past]])}
    example = (torch.randint(0, vocab, (1, 1)), *(extra[n] for n in extra_names),
               *(torch.randn(1, heads, args.past, head_dim) for _ in past_names))
    dynamic = {**{n: {2: "past"} for n in past_names}, **{n: {2: "present"} for n in present_names}}
    if "attention_mask" in extra_names:
        dynamic["attention_mask"] = {1: "total"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = export_sequence_models.decoding_step(model, extra_names)
        torch.onnx.export(step, example, args.output, opset_version=17,
                          input_names=["input_ids", *extra_names, *past_names],
                          output_names=["logits", *present_names], dynamic_axes=dynamic, do_constant_folding=True)
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Export one decoding step of a GPT-2 language model with a key/value cache.

Hugging Face's GPT2LMHeadModel (transformers, seeded random weights; GPT-2
small's sizes by default: 12 layers, hidden 768, 12 heads, vocabulary 50257,
about 620 MB of float32 weights), exported at opset 17 as one step: inputs
input_ids [1, 1] and past_<layer>_k / past_<layer>_v [1, heads, past, 64]
(`past` symbolic), outputs the logits [1, 1, vocabulary] and each layer's
present key and value. Every product has one row, so the run reads every
weight once: a benchmark of how fast an engine streams its weights.

    build/venv/bin/python bench/models/gpt2_step.py /tmp/gpt2_step.onnx [--layers 12]
    build/venv/bin/python bench/compare /tmp/gpt2_step.onnx --dim past=127 --threads 1,2 --cycles 5 --iters 20
"""

from __future__ import annotations

import argparse
import sys
import warnings


def _count(low: int, high: int):
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in {low}-{high}")
        return value
    return parse


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("output", help="the .onnx file to write")
    parser.add_argument("--layers", type=_count(1, 48), default=12, help="transformer layers (1-48)")
    parser.add_argument("--past", type=_count(1, 1023), default=127, help="past length of the example inputs (the axis stays symbolic)")
    args = parser.parse_args(argv)

    import torch
    import transformers

    torch.manual_seed(20261207)
    layers, heads, head_dim = args.layers, 12, 64
    config = transformers.GPT2Config(n_layer=layers, n_embd=heads * head_dim, n_head=heads, vocab_size=50257,
                                     n_positions=1024, use_cache=True)
    model = transformers.GPT2LMHeadModel(config).eval()

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, *past):
            pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(layers))
            out = self.model(input_ids=input_ids, past_key_values=pairs, use_cache=True)
            return (out.logits, *(t for pair in out.past_key_values for t in pair))

    names = [f"{kind}_{layer}_{half}" for kind in ("past", "present") for layer in range(layers) for half in "kv"]
    past_names, present_names = names[:2 * layers], names[2 * layers:]
    ids = torch.randint(0, config.vocab_size, (1, 1))
    past = [torch.randn(1, heads, args.past, head_dim) for _ in past_names]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Step(), (ids, *past), args.output, opset_version=17,
                          input_names=["input_ids"] + past_names, output_names=["logits"] + present_names,
                          dynamic_axes={**{n: {2: "past"} for n in past_names},
                                        **{n: {2: "present"} for n in present_names}},
                          do_constant_folding=True)
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

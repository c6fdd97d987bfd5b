#!/usr/bin/env python3
"""Export the sequence models of the model tests (transformers) with dynamic axes.

Each model is written by hand in PyTorch the way its reference implementation
is (seeded random weights; nothing is downloaded) and exported at opset 17
with dynamic batch and sequence axes. For each of several input shapes a case
folder holds the inputs and the reference outputs:

    <cache>/<name>/<name>.onnx
    <cache>/<name>/case_<k>/<input name>.npy      inputs of case k
    <cache>/<name>/case_<k>/expected/torch.npy    PyTorch eval-mode output (the first)
    <cache>/<name>/case_<k>/expected/ort.npy      ONNX Runtime output (the first)
    <cache>/<name>/meta.json                      recipe stamp, shapes, timings

The folder is rebuilt when the recipe changes (RECIPE_VERSION); writes are
atomic and per-model locked, as in export_models.py.

Models:
  bert  BERT-base encoder (12 layers, hidden 768, 12 heads, FFN 3072, vocab
        30522): token, position (torch.arange -> Range) and segment
        embeddings, post-LayerNorm blocks, erf GELU, additive attention mask
        from an int64 mask input. Inputs input_ids, attention_mask [batch, seq].
  gpt2  GPT-2-style decoder (4 layers, hidden 256, 4 heads, vocab 1000):
        pre-LayerNorm blocks, causal mask by Where over a sliced lower-
        triangular buffer, tanh GELU, tied input/output embeddings. Input
        input_ids [batch, seq]; output logits [batch, seq, vocab].
  loop  scripted recurrence h = tanh(W h + b) + x repeated `steps` times: a
        Loop whose trip count is an input and whose body reads x and the
        weights from the enclosing graph.
  if    scripted branch on the sign of sum(x): an If whose branches run
        different Linear layers.
  lstm  speech-style acoustic model: 2-layer LSTM (40 features, hidden 128,
        time-major [seq, batch, 40]) and a Linear head over 30 symbols.
  gru   bidirectional GRU (batch-first [batch, seq, 24], hidden 64) and a
        Linear head: PyTorch's GRU exports with linear_before_reset=1.
  hf_bert  Hugging Face's BertModel (transformers 4.30, 2 layers, hidden 64,
        4 heads, vocab 1000): its export computes every shape from Shape
        nodes, slices position_ids[:, :seq] from a buffer, and reads the
        merged heads' shape after the permute. Output last_hidden_state.
  hf_gpt2  Hugging Face's GPT2Model (2 layers, hidden 64, 4 heads, vocab
        1000): Conv1D products as Gemm between views, a causal mask sliced
        by key_length - query_length, the scores cast to their own type.
  hf_gpt2_step  Hugging Face's GPT2LMHeadModel (the same sizes) taking one
        decoding step with a cache of past keys and values: inputs input_ids
        [batch, 1] and past_<layer>_k / _v [batch, 4, past, 16]; outputs the
        logits [batch, 1, 1000], then each layer's present key and value
        (the past with the step's own appended). The cases' second number is
        the past's length. Products of one row, a Concat of the past with the
        step's keys before the scores.
  hf_llama_step  Hugging Face's LlamaForCausalLM (2 layers, hidden 64, 4
        heads, FFN 128, vocab 1000) taking one step likewise, with inputs
        attention_mask [batch, past + 1] (ones) and position_ids [batch, 1]
        (the past's length) besides: RMSNorm, rotary embeddings whose tables
        PyTorch squeezes through an If of a shape test (a constant once the
        shapes fold), SwiGLU.
  hf_distilbert  Hugging Face's DistilBertModel (2 layers, hidden 64, 4
        heads, vocab 1000): queries scaled before the product, padding by
        masked_fill(Expand(mask == 0, scores' shape), finfo.min).
  hf_bart  Hugging Face's BART encoder (2 layers, d_model 64, 4 heads,
        vocab 1000): torch.bmm attention with the heads folded into the
        batch, Q scaled before the split, the mask added to a 4-D view.
  hf_clip  Hugging Face's CLIPTextModel (2 layers, hidden 64, 4 heads,
        vocab 1000): the same attention with a causal and a padding mask,
        each added between a view and a view back.
  vit   torchvision's VisionTransformer, small (32x32 images, patches of 8,
        2 layers, hidden 64, 4 heads, 10 classes), with a dynamic batch:
        nn.MultiheadAttention sequence first, the class token expanded by
        expand(n, -1, -1). Input x [batch, 3, 32, 32]; the sequence axis of
        SHAPES is unused.

Usage: build/venv/bin/python tests/models/export_sequence_models.py [NAME...] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_models  # noqa: E402  (cache folder, atomic writes, locks)

OPSET = 17
SEED = 20261203
RECIPE_VERSION = 1

# (batch, sequence) of each case: three shapes served by one session.
SHAPES = {
    "bert": [(1, 7), (2, 16), (1, 64)],
    "gpt2": [(1, 5), (3, 12), (2, 32)],
    # Control flow (scripted): (batch, trip count) and (batch, sign of the input's sum).
    "loop": [(1, 3), (4, 0), (2, 7)],
    "if": [(1, 1), (3, -1), (2, 1)],
    # Recurrent: (batch, sequence).
    "lstm": [(1, 10), (3, 25), (2, 4)],
    "gru": [(2, 6), (1, 30), (4, 13)],
    # Exports of Hugging Face's and torchvision's own modules.
    "hf_bert": [(1, 7), (2, 16), (1, 64)],
    "hf_gpt2": [(1, 5), (3, 12), (2, 32)],
    "hf_gpt2_step": [(1, 5), (3, 12), (2, 31)],  # (batch, past length)
    "hf_llama_step": [(1, 5), (3, 12), (2, 31)],  # likewise
    "hf_distilbert": [(1, 7), (2, 16), (1, 64)],
    "hf_bart": [(1, 7), (2, 16), (1, 64)],
    "hf_clip": [(1, 7), (2, 16), (1, 64)],
    "vit": [(1, 0), (3, 0), (2, 0)],
    "hf_wav2vec2": [(1, 1600), (2, 2405), (1, 4000)],  # (batch, audio samples)
    "hf_segformer": [(1, 0), (3, 0), (2, 0)],
    "hf_poolformer": [(1, 0), (3, 0), (2, 0)],
    "hf_levit": [(1, 0), (3, 0), (2, 0)],
}
MODEL_NAMES = list(SHAPES)


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def _bert():
    import torch
    import torch.nn as nn

    vocab, hidden, layers, heads, ffn, max_pos = 30522, 768, 12, 12, 3072, 512

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
            self.out = nn.Linear(hidden, hidden)
            self.head_dim = hidden // heads

        def split(self, x):
            b, s, _ = x.shape
            return x.view(b, s, heads, self.head_dim).transpose(1, 2)

        def forward(self, x, mask):
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
            context = torch.matmul(torch.softmax(scores, dim=-1), v)
            b, _, s, _ = context.shape
            return self.out(context.transpose(1, 2).reshape(b, s, hidden))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = SelfAttention()
            self.norm1, self.norm2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
            self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))

        def forward(self, x, mask):
            x = self.norm1(x + self.attention(x, mask))
            return self.norm2(x + self.ffn(x))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.words = nn.Embedding(vocab, hidden)
            self.positions = nn.Embedding(max_pos, hidden)
            self.segments = nn.Embedding(2, hidden)
            self.norm = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, input_ids, attention_mask):
            seq = input_ids.shape[1]
            positions = torch.arange(seq, dtype=torch.long, device=input_ids.device).unsqueeze(0)
            x = self.words(input_ids) + self.positions(positions) + self.segments(torch.zeros_like(input_ids))
            x = self.norm(x)
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, mask)
            return x

    return Bert()


def _gpt2():
    import torch
    import torch.nn as nn

    vocab, hidden, layers, heads, max_pos = 1000, 256, 4, 4, 128

    def gelu_tanh(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.register_buffer("causal", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool)))

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).split(hidden, dim=2)
            q, k, v = (t.view(b, s, heads, hidden // heads).transpose(1, 2) for t in (q, k, v))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hidden // heads)
            scores = torch.where(self.causal[:s, :s], scores, torch.tensor(-1e4, dtype=scores.dtype))
            context = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, hidden)
            return self.proj(context)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.attn = Attention()
            self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.out(gelu_tanh(self.fc(self.ln2(x))))

    class Gpt2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(max_pos, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)
            self.head.weight = self.wte.weight  # tied embeddings

        def forward(self, input_ids):
            positions = torch.arange(input_ids.shape[1], dtype=torch.long).unsqueeze(0)
            x = self.wte(input_ids) + self.wpe(positions)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return Gpt2()


def _loop():
    import torch
    import torch.nn as nn

    class Recurrence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 16)

        def forward(self, x, steps):
            h = x
            for _ in range(int(steps)):  # data-dependent trip count -> Loop
                h = torch.tanh(self.lin(h)) + x
            return h

    return torch.jit.script(Recurrence())


def _if():
    import torch
    import torch.nn as nn

    class Branch(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            if bool(x.sum() > 0):  # data-dependent branch -> If
                y = self.a(x) * 2.0
            else:
                y = self.b(x) - 1.0
            return y

    return torch.jit.script(Branch())


def _lstm():
    import torch.nn as nn

    class Acoustic(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(40, 128, num_layers=2)
            self.head = nn.Linear(128, 30)

        def forward(self, features):
            out, _ = self.rnn(features)
            return self.head(out)

    return Acoustic()


def _gru():
    import torch.nn as nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(24, 64, batch_first=True, bidirectional=True)
            self.head = nn.Linear(128, 10)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.head(out)

    return Tagger()


def _last_hidden_state(model, with_mask: bool):
    """A Hugging Face module whose forward returns only last_hidden_state."""
    import torch.nn as nn

    class LastHiddenState(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask=None):
            if with_mask:
                return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.model(input_ids=input_ids).last_hidden_state

    return LastHiddenState()


def _hf_bert():
    import transformers

    config = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=128)
    return _last_hidden_state(transformers.BertModel(config, add_pooling_layer=False), with_mask=True)


def _hf_gpt2():
    import transformers

    config = transformers.GPT2Config(vocab_size=1000, n_positions=128, n_embd=64, n_layer=2, n_head=4, use_cache=False)
    return _last_hidden_state(transformers.GPT2Model(config), with_mask=False)


HF_STEP_LAYERS, HF_STEP_HEADS, HF_STEP_HEAD_DIM = 2, 4, 16


def decoding_step(model, extra_inputs: tuple = ()):
    """A Hugging Face causal LM as one decoding step: the logits, then every
    layer's present key and value (`extra_inputs` come before the past).
    Also bench/models/decoder_step.py's."""
    import torch.nn as nn

    layers = model.config.num_hidden_layers

    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, *rest):
            extra, past = rest[:len(extra_inputs)], rest[len(extra_inputs):]
            pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(layers))
            out = self.model(input_ids=input_ids, past_key_values=pairs, use_cache=True,
                             **dict(zip(extra_inputs, extra)))
            return (out.logits, *(t for pair in out.past_key_values for t in pair))

    return Step()


def _hf_gpt2_step():
    import transformers

    config = transformers.GPT2Config(vocab_size=1000, n_positions=128, n_embd=HF_STEP_HEADS * HF_STEP_HEAD_DIM,
                                     n_layer=HF_STEP_LAYERS, n_head=HF_STEP_HEADS, use_cache=True)
    return decoding_step(transformers.GPT2LMHeadModel(config))


def _hf_llama_step():
    import transformers

    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=HF_STEP_HEADS * HF_STEP_HEAD_DIM,
                                      intermediate_size=128, num_hidden_layers=HF_STEP_LAYERS,
                                      num_attention_heads=HF_STEP_HEADS, max_position_embeddings=128, use_cache=True)
    return decoding_step(transformers.LlamaForCausalLM(config), ("attention_mask", "position_ids"))


def _past_names(kind: str) -> list:
    return [f"{kind}_{layer}_{half}" for layer in range(HF_STEP_LAYERS) for half in "kv"]


def _hf_distilbert():
    import transformers

    config = transformers.DistilBertConfig(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                           max_position_embeddings=128)
    return _last_hidden_state(transformers.DistilBertModel(config), with_mask=True)


def _hf_bart():
    import transformers

    config = transformers.BartConfig(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                     decoder_ffn_dim=128, max_position_embeddings=128)
    return _last_hidden_state(transformers.BartModel(config).get_encoder(), with_mask=True)


def _hf_clip():
    import transformers

    config = transformers.CLIPTextConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, max_position_embeddings=77)
    return _last_hidden_state(transformers.CLIPTextModel(config), with_mask=True)


def _one_output(model, input_name: str, field: str):
    """A Hugging Face module of one input whose forward returns only `field` of its output."""
    import torch.nn as nn

    class OneOutput(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return getattr(self.model(**{input_name: x}), field)

    return OneOutput()


def _hf_wav2vec2():
    """wav2vec2's feature encoder at full width (512-channel 1-D
    convolutions, stride 2 after the first: conv1d_gemm's case on AVX-512)
    under a small transformer."""
    import transformers

    config = transformers.Wav2Vec2Config(conv_dim=(512, 512, 512), conv_kernel=(10, 3, 2), conv_stride=(5, 2, 2),
                                         hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, num_conv_pos_embeddings=16,
                                         num_conv_pos_embedding_groups=4)
    return _one_output(transformers.Wav2Vec2Model(config), "input_values", "last_hidden_state")


def _hf_segformer():
    """SegFormer (MiT encoder, all-MLP decode head) at 64 x 64: tokens turned
    into images for convolutions and back in every block, the decode head's
    projections resized and concatenated (passes/tokens_as_image.cc)."""
    import transformers

    config = transformers.SegformerConfig(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 48, 64],
                                          num_attention_heads=[1, 2, 2, 4], decoder_hidden_size=64, num_labels=3)
    return _one_output(transformers.SegformerForSemanticSegmentation(config), "pixel_values", "logits")


def _hf_poolformer():
    """PoolFormer at 64 x 64: GroupNorm(1, C) before every token mixer and
    MLP (passes/fuse_group_norm.cc), between convolutions."""
    import transformers

    config = transformers.PoolFormerConfig(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 48, 64])
    return _one_output(transformers.PoolFormerModel(config), "pixel_values", "last_hidden_state")


def _hf_levit():
    """LeViT at 64 x 64: Linear + BatchNorm1d layers exported as MatMul,
    Flatten, BatchNormalization, Reshape (passes/fold_linear_batchnorm.cc;
    running statistics drawn at random, not PyTorch's 0 and 1), attention
    over 4-D heads split per head from one projection, with a position bias
    (passes/fuse_head_attention.cc)."""
    import torch
    import transformers

    config = transformers.LevitConfig(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[2, 3, 4],
                                      depths=[1, 1, 1], key_dim=[8, 8, 8])
    model = transformers.LevitModel(config)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.normal_(0.0, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.5)
    return _one_output(model, "pixel_values", "last_hidden_state")


def _vit():
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
                             num_classes=10)


BUILDERS = {"bert": _bert, "gpt2": _gpt2, "loop": _loop, "if": _if, "lstm": _lstm, "gru": _gru, "hf_bert": _hf_bert,
            "hf_gpt2": _hf_gpt2, "hf_gpt2_step": _hf_gpt2_step, "hf_llama_step": _hf_llama_step,
            "hf_distilbert": _hf_distilbert, "hf_bart": _hf_bart,
            "hf_clip": _hf_clip, "vit": _vit, "hf_wav2vec2": _hf_wav2vec2, "hf_segformer": _hf_segformer,
            "hf_poolformer": _hf_poolformer, "hf_levit": _hf_levit}
INPUTS = {"bert": ["input_ids", "attention_mask"], "gpt2": ["input_ids"], "loop": ["x", "steps"], "if": ["x"],
          "lstm": ["features"], "gru": ["x"], "hf_bert": ["input_ids", "attention_mask"], "hf_gpt2": ["input_ids"],
          "hf_gpt2_step": ["input_ids"] + _past_names("past"),
          "hf_llama_step": ["input_ids", "attention_mask", "position_ids"] + _past_names("past"),
          "hf_distilbert": ["input_ids", "attention_mask"], "hf_bart": ["input_ids", "attention_mask"],
          "hf_clip": ["input_ids", "attention_mask"], "vit": ["x"], "hf_wav2vec2": ["input_values"],
          "hf_segformer": ["pixel_values"], "hf_poolformer": ["pixel_values"],
          "hf_levit": ["pixel_values"]}
OUTPUTS = {"bert": ["last_hidden_state"], "gpt2": ["logits"], "loop": ["y"], "if": ["y"], "lstm": ["scores"],
           "gru": ["tags"], "hf_bert": ["last_hidden_state"], "hf_gpt2": ["last_hidden_state"],
           "hf_gpt2_step": ["logits"] + _past_names("present"), "hf_llama_step": ["logits"] + _past_names("present"),
           "hf_distilbert": ["last_hidden_state"], "hf_bart": ["last_hidden_state"],
           "hf_clip": ["last_hidden_state"], "vit": ["scores"], "hf_wav2vec2": ["last_hidden_state"],
           "hf_segformer": ["logits"], "hf_poolformer": ["last_hidden_state"],
           "hf_levit": ["last_hidden_state"]}
VOCAB = {"bert": 30522, "gpt2": 1000, "hf_bert": 1000, "hf_gpt2": 1000, "hf_gpt2_step": 1000, "hf_llama_step": 1000,
         "hf_distilbert": 1000, "hf_bart": 1000,
         "hf_clip": 1000}
# Dynamic axes of every input and output, or per name (a dict of dicts).
AXES = {"bert": {0: "batch", 1: "sequence"}, "gpt2": {0: "batch", 1: "sequence"}, "loop": {0: "batch"},
        "if": {0: "batch"}, "lstm": {0: "sequence", 1: "batch"}, "gru": {0: "batch", 1: "sequence"},
        "hf_bert": {0: "batch", 1: "sequence"}, "hf_gpt2": {0: "batch", 1: "sequence"},
        "hf_distilbert": {0: "batch", 1: "sequence"}, "hf_bart": {0: "batch", 1: "sequence"},
        "hf_clip": {0: "batch", 1: "sequence"}, "vit": {0: "batch"},
        "hf_segformer": {0: "batch"}, "hf_poolformer": {0: "batch"}, "hf_levit": {0: "batch"},
        "hf_wav2vec2": {"input_values": {0: "batch", 1: "samples"}, "last_hidden_state": {0: "batch", 1: "frames"}},
        "hf_gpt2_step": {"input_ids": {0: "batch"}, "logits": {0: "batch"},
                         **{n: {0: "batch", 2: "past"} for n in _past_names("past")},
                         **{n: {0: "batch", 2: "present"} for n in _past_names("present")}},
        "hf_llama_step": {"input_ids": {0: "batch"}, "attention_mask": {0: "batch", 1: "total"},
                          "position_ids": {0: "batch"}, "logits": {0: "batch"},
                          **{n: {0: "batch", 2: "past"} for n in _past_names("past")},
                          **{n: {0: "batch", 2: "present"} for n in _past_names("present")}}}


def dynamic_axes(name: str) -> dict:
    """torch.onnx.export's dynamic_axes for the model's inputs and outputs."""
    axes = AXES[name]
    if all(isinstance(v, dict) for v in axes.values()):
        return axes
    return {n: axes for n in INPUTS[name] + OUTPUTS[name] if n != "steps"}


# Multi-head attention nodes `anvil optimize` must make of each (one per layer).
ATTENTION_LAYERS = {"bert": 12, "gpt2": 4, "hf_bert": 2, "hf_gpt2": 2, "hf_distilbert": 2, "hf_bart": 2, "hf_clip": 2,
                    "vit": 2}


def make_inputs(name: str, batch: int, seq: int, rng: np.random.Generator) -> dict:
    if name == "loop":
        return {"x": rng.standard_normal((batch, 16), dtype=np.float32), "steps": np.array(seq, dtype=np.int64)}
    if name == "lstm":
        return {"features": rng.standard_normal((seq, batch, 40), dtype=np.float32)}
    if name == "gru":
        return {"x": rng.standard_normal((batch, seq, 24), dtype=np.float32)}
    if name == "vit":
        return {"x": rng.standard_normal((batch, 3, 32, 32), dtype=np.float32)}
    if name in ("hf_segformer", "hf_poolformer", "hf_levit"):
        return {"pixel_values": rng.standard_normal((batch, 3, 64, 64), dtype=np.float32)}
    if name == "hf_wav2vec2":
        return {"input_values": rng.standard_normal((batch, seq), dtype=np.float32)}
    if name == "if":
        x = np.abs(rng.standard_normal((batch, 8), dtype=np.float32)) * seq  # seq gives the sign of the sum
        return {"x": x}
    if name in ("hf_gpt2_step", "hf_llama_step"):
        ids = rng.integers(0, VOCAB[name], size=(batch, 1), dtype=np.int64)
        shape = (batch, HF_STEP_HEADS, seq, HF_STEP_HEAD_DIM)
        past = {n: rng.standard_normal(shape, dtype=np.float32) for n in _past_names("past")}
        if name == "hf_gpt2_step":
            return {"input_ids": ids, **past}
        mask = np.ones((batch, seq + 1), dtype=np.int64)
        positions = np.full((batch, 1), seq, dtype=np.int64)
        return {"input_ids": ids, "attention_mask": mask, "position_ids": positions, **past}
    ids = rng.integers(0, VOCAB[name], size=(batch, seq), dtype=np.int64)
    if name in ("gpt2", "hf_gpt2"):
        return {"input_ids": ids}
    mask = np.ones((batch, seq), dtype=np.int64)
    if batch > 1:
        mask[1:, seq // 2:] = 0  # padded sequences: the mask must matter
    return {"input_ids": ids, "attention_mask": mask}


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------

def model_dir(name: str, cache_dir: Path | None) -> Path:
    return (cache_dir or export_models.default_cache_dir()) / name


def recipe(name: str) -> dict:
    return {"recipe": RECIPE_VERSION, "name": name, "opset": OPSET, "seed": SEED, "shapes": SHAPES[name]}


def case_dirs(name: str, cache_dir: Path | None = None) -> list:
    folder = model_dir(name, cache_dir)
    return [folder / f"case_{k}" for k in range(len(SHAPES[name]))]


def export_model(name: str, cache_dir: Path | None = None, force: bool = False) -> Path:
    """Exports `name` (if not cached) and returns its .onnx path."""
    import torch

    folder = model_dir(name, cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = folder / f"{name}.onnx"
    meta_path = folder / "meta.json"
    with export_models.locked(folder):
        if not force and meta_path.exists() and json.loads(meta_path.read_text()).get("recipe") == recipe(name):
            return onnx_path
        t0 = time.time()
        torch.manual_seed(SEED)
        model = BUILDERS[name]().eval()
        rng = np.random.default_rng(SEED)
        cases = [make_inputs(name, b, s, rng) for b, s in SHAPES[name]]
        example = tuple(torch.from_numpy(np.asarray(cases[0][i])) for i in INPUTS[name])
        dynamic = dynamic_axes(name)
        with export_models.atomic_path(onnx_path) as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, example, str(tmp), input_names=INPUTS[name], output_names=OUTPUTS[name],
                              dynamic_axes=dynamic, opset_version=OPSET, do_constant_folding=True)
        import onnxruntime as ort

        session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        for k, inputs in enumerate(cases):
            case = folder / f"case_{k}"
            (case / "expected").mkdir(parents=True, exist_ok=True)
            for n, array in inputs.items():
                export_models.save_npy(case / f"{n}.npy", array)
            with torch.no_grad():
                expected = model(*(torch.from_numpy(np.asarray(inputs[i])) for i in INPUTS[name]))
                expected = (expected[0] if isinstance(expected, tuple) else expected).numpy()  # the first output
            export_models.save_npy(case / "expected" / "torch.npy", expected)
            export_models.save_npy(case / "expected" / "ort.npy", session.run(None, inputs)[0])
        meta = {"recipe": recipe(name), "export_s": round(time.time() - t0, 1)}
        with export_models.atomic_path(meta_path) as tmp:
            tmp.write_text(json.dumps(meta, indent=2))
    return onnx_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", default=MODEL_NAMES, choices=MODEL_NAMES)
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    for name in args.names:
        print(export_model(name, args.cache_dir, args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Writes the Llama model directory ms-infer serves (config.json, *.safetensors, tokenizer.json
with GPT-2 BPE) as a GGUF file llama.cpp loads, for scripts/bench/llamacpp_decode.sh: the same
weights, so that llama.cpp's decode can be timed beside ms-infer's on one model.

--type picks how the linear layers (and the lm head) are stored: f32, q8_0 (blocks of 32
weights, an fp16 scale and 32 int8 codes: 8.5 bits a weight) or q4_0 (blocks of 32, an fp16
scale and 32 4-bit codes: 4.5 bits a weight), quantized as llama.cpp's reference quantizers do
(q8_0: scale max|x| / 127, codes rounded; q4_0: scale the signed value of largest magnitude over
-8, codes floor(x / scale + 8.5) capped at 15). Norms and the embedding table stay f32. q and k
are permuted from the half-split rotary layout of Hugging Face's Llama to the interleaved one
llama.cpp's LLAMA architecture rotates, as its own converter does. Dense models only.

Written for Debian's python3-torch (the weights are read by infer_bench_torch.py's reader) and
numpy, run with /usr/bin/python3."""
import argparse
import json
import os
import struct
import sys

import numpy as np

# The safetensors reader of the PyTorch yardstick beside it (f32, bf16 or f16 tensors as f32).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from infer_bench_torch import read_safetensors  # noqa: E402

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32
# GGUF metadata value types.
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9
# ggml tensor types.
GGML_F32, GGML_Q4_0, GGML_Q8_0 = 0, 2, 8
# general.file_type: all f32, mostly q4_0, mostly q8_0.
FILE_TYPE = {"f32": 0, "q4_0": 2, "q8_0": 7}


def quantize_q8_0(w):
    """(rows, cols) f32, cols a multiple of 32 -> the q8_0 bytes, row-major blocks."""
    blocks = w.reshape(-1, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=1)
    d = amax / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    codes = np.round(blocks * inv[:, None]).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = codes.view(np.uint8)
    return out.tobytes()


def quantize_q4_0(w):
    """(rows, cols) f32, cols a multiple of 32 -> the q4_0 bytes: per block an fp16 scale, then
    16 bytes whose low nibbles hold weights 0-15 and high nibbles weights 16-31."""
    blocks = w.reshape(-1, 32).astype(np.float32)
    largest = blocks[np.arange(blocks.shape[0]), np.abs(blocks).argmax(axis=1)]
    d = largest / -8.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    codes = np.minimum(15, np.floor(blocks * inv[:, None] + 8.5)).astype(np.uint8)
    out = np.empty((blocks.shape[0], 18), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = codes[:, :16] | (codes[:, 16:] << 4)
    return out.tobytes()


def permute_rotary(w, heads):
    """Rows of q or k from the half-split rotary layout to the interleaved one, per head."""
    rows, cols = w.shape
    return w.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []  # (name, shape as ggml dims, ggml type, bytes)

    @staticmethod
    def string(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def add(self, key, vtype, value):
        body = struct.pack("<I", vtype)
        if vtype == T_STRING:
            body += self.string(value)
        elif vtype == T_UINT32:
            body += struct.pack("<I", value)
        elif vtype == T_FLOAT32:
            body += struct.pack("<f", value)
        else:
            raise ValueError(vtype)
        self.kv.append(self.string(key) + body)

    def add_array(self, key, etype, values):
        body = struct.pack("<IIQ", T_ARRAY, etype, len(values))
        if etype == T_STRING:
            body += b"".join(self.string(v) for v in values)
        elif etype == T_INT32:
            body += np.asarray(values, dtype="<i4").tobytes()
        else:
            raise ValueError(etype)
        self.kv.append(self.string(key) + body)

    def tensor(self, name, w, ggml_type):
        """w: (rows, cols) or (n,) f32; ggml lists dimensions innermost first."""
        dims = list(reversed(w.shape))
        if ggml_type == GGML_F32:
            data = np.ascontiguousarray(w, dtype="<f4").tobytes()
        elif ggml_type == GGML_Q8_0:
            data = quantize_q8_0(w)
        else:
            data = quantize_q4_0(w)
        self.tensors.append((name, dims, ggml_type, data))

    def write(self, path):
        infos, offset = [], 0
        for name, dims, ggml_type, data in self.tensors:
            infos.append(self.string(name) + struct.pack("<I", len(dims))
                         + struct.pack("<%dQ" % len(dims), *dims)
                         + struct.pack("<IQ", ggml_type, offset))
            offset += (len(data) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        head = (GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
                + b"".join(self.kv) + b"".join(infos))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(b"\0" * (-len(head) % ALIGNMENT))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGNMENT))
        os.replace(tmp, path)

    def step_bytes(self):
        """Bytes a decode step reads of the file's tensors: all but the embedding table."""
        return sum(len(data) for name, _, _, data in self.tensors if name != "token_embd.weight")


def gpt2_vocab(tokenizer_path, vocab_size):
    """tokens, token types and merges for tokenizer.ggml.*, padded to the model's vocab_size."""
    with open(tokenizer_path) as f:
        tok = json.load(f)
    model = tok["model"]
    if model.get("type") != "BPE":
        raise SystemExit(tokenizer_path + ": expected a BPE tokenizer")
    tokens = ["[PAD%d]" % i for i in range(vocab_size)]
    types = [5] * vocab_size  # unused, until a vocab entry fills the id
    for text, i in model["vocab"].items():
        if i < vocab_size:
            tokens[i], types[i] = text, 1
    for added in tok.get("added_tokens", []):
        if added["id"] < vocab_size:
            tokens[added["id"]] = added["content"]
            types[added["id"]] = 3 if added.get("special") else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face Llama model directory")
    p.add_argument("--out", required=True, help="GGUF file to write")
    p.add_argument("--type", choices=("f32", "q8_0", "q4_0"), default="f32")
    a = p.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("num_local_experts", 0) or cfg.get("model_type", "llama") != "llama":
        raise SystemExit(a.model + ": only dense Llama models are written")
    w = {}
    for name in sorted(os.listdir(a.model)):
        if name.endswith(".safetensors"):
            w.update((k, t.numpy()) for k, t in read_safetensors(os.path.join(a.model, name)).items())
    d, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim") or d // heads
    vocab = cfg["vocab_size"]
    linear = {"f32": GGML_F32, "q8_0": GGML_Q8_0, "q4_0": GGML_Q4_0}[a.type]

    g = Writer()
    g.add("general.architecture", T_STRING, "llama")
    g.add("general.name", T_STRING, os.path.basename(os.path.normpath(a.model)))
    g.add("general.file_type", T_UINT32, FILE_TYPE[a.type])
    g.add("llama.context_length", T_UINT32, cfg["max_position_embeddings"])
    g.add("llama.embedding_length", T_UINT32, d)
    g.add("llama.block_count", T_UINT32, layers)
    g.add("llama.feed_forward_length", T_UINT32, cfg["intermediate_size"])
    g.add("llama.attention.head_count", T_UINT32, heads)
    g.add("llama.attention.head_count_kv", T_UINT32, kv_heads)
    g.add("llama.attention.key_length", T_UINT32, head_dim)
    g.add("llama.attention.value_length", T_UINT32, head_dim)
    g.add("llama.rope.dimension_count", T_UINT32, head_dim)
    g.add("llama.rope.freq_base", T_FLOAT32, float(cfg.get("rope_theta", 10000.0)))
    g.add("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, float(cfg.get("rms_norm_eps", 1e-5)))
    g.add("llama.vocab_size", T_UINT32, vocab)
    tokens, types, merges = gpt2_vocab(os.path.join(a.model, "tokenizer.json"), vocab)
    g.add("tokenizer.ggml.model", T_STRING, "gpt2")
    g.add("tokenizer.ggml.pre", T_STRING, "gpt-2")
    g.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    g.add_array("tokenizer.ggml.token_type", T_INT32, types)
    g.add_array("tokenizer.ggml.merges", T_STRING, merges)
    eos = 50256 if vocab > 50256 else vocab - 1
    g.add("tokenizer.ggml.bos_token_id", T_UINT32, eos)
    g.add("tokenizer.ggml.eos_token_id", T_UINT32, eos)

    g.tensor("token_embd.weight", w["model.embed_tokens.weight"], GGML_F32)
    for l in range(layers):
        hf, gg = "model.layers.%d." % l, "blk.%d." % l
        g.tensor(gg + "attn_norm.weight", w[hf + "input_layernorm.weight"], GGML_F32)
        g.tensor(gg + "attn_q.weight", permute_rotary(w[hf + "self_attn.q_proj.weight"], heads), linear)
        g.tensor(gg + "attn_k.weight", permute_rotary(w[hf + "self_attn.k_proj.weight"], kv_heads),
                 linear)
        g.tensor(gg + "attn_v.weight", w[hf + "self_attn.v_proj.weight"], linear)
        g.tensor(gg + "attn_output.weight", w[hf + "self_attn.o_proj.weight"], linear)
        g.tensor(gg + "ffn_norm.weight", w[hf + "post_attention_layernorm.weight"], GGML_F32)
        g.tensor(gg + "ffn_gate.weight", w[hf + "mlp.gate_proj.weight"], linear)
        g.tensor(gg + "ffn_up.weight", w[hf + "mlp.up_proj.weight"], linear)
        g.tensor(gg + "ffn_down.weight", w[hf + "mlp.down_proj.weight"], linear)
    g.tensor("output_norm.weight", w["model.norm.weight"], GGML_F32)
    lm_head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    g.tensor("output.weight", lm_head, linear)
    g.write(a.out)
    print("gguf %s: %s, %.2f MB of weights read per decode step (all but the embedding table)"
          % (a.type, a.out, g.step_bytes() / 1e6))


if __name__ == "__main__":
    main()

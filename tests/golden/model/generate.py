#!/usr/bin/python3
"""Golden outputs for ms-train from an independent PyTorch implementation.

For every case directory under tests/golden/model/ (written by ms_golden_export: case.json,
weights.safetensors, batch.safetensors) this script builds the model of docs/model.md in
PyTorch from the exported weights, written from the documentation and the Hugging Face
Llama/Mixtral definitions (no code shared with lib/model), and records in golden.safetensors:

  logits            (B, T, V) at the exported weights
  loss, aux_loss    (1,) mean cross-entropy and the MoE load-balancing loss (0 when dense)
  objective         (1,) loss + aux_loss_coef * aux_loss, the quantity that is differentiated
  grad.<name>       d(objective)/d(parameter) for every parameter
  curve, curve_aux  (steps,) loss and aux loss BEFORE each of `steps` torch.optim.AdamW updates
                    on the same batch (constant lr, no clipping, weight decay only for the
                    parameters not listed in case.json's no_weight_decay)

Everything is computed in float64 and stored as F32. Torch 1.13 (Debian python3-torch) has
neither a safetensors package nor fused attention or RMSNorm, so the container format,
attention and RMSNorm are written out here. Run with /usr/bin/python3; CI never runs it.
Usage: generate.py [case-dir ...]   (default: every directory next to this script)
"""

import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "I32": torch.int32, "I64": torch.int64}
DTYPE_NAMES = {torch.float32: "F32", torch.int32: "I32"}


def read_safetensors(path):
    """Returns {name: tensor} of a safetensors file (8-byte LE header length, JSON, data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        begin, end = spec["data_offsets"]
        raw = bytearray(blob[base + begin:base + end])
        tensors[name] = torch.frombuffer(raw, dtype=DTYPES[spec["dtype"]]).reshape(spec["shape"])
    return tensors


def write_safetensors(path, tensors, metadata):
    """Writes {name: tensor} (in insertion order) with string metadata, atomically."""
    header = {"__metadata__": metadata}
    chunks = []
    offset = 0
    for name, tensor in tensors.items():
        raw = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rms_norm(x, weight, eps):
    """y = w * x / sqrt(mean(x^2) + eps) over the last dimension."""
    return weight * x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, theta):
    """x is (B, heads, T, hd); Hugging Face's half-split convention, position = index in T."""
    hd, seq = x.shape[-1], x.shape[-2]
    inv_freq = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1).to(x.dtype)
    return x * torch.cos(angles) + rotate_half(x) * torch.sin(angles)


def attention(x, p, prefix, cfg):
    """x is (B, T, D) normed input; causal GQA attention with optional sliding window."""
    batch, seq, _ = x.shape
    heads, kv_heads = cfg["n_heads"], cfg["n_kv_heads"]
    hd = cfg["d_model"] // heads
    q = (x @ p[prefix + "q_proj.weight"].T).view(batch, seq, heads, hd).transpose(1, 2)
    k = (x @ p[prefix + "k_proj.weight"].T).view(batch, seq, kv_heads, hd).transpose(1, 2)
    v = (x @ p[prefix + "v_proj.weight"].T).view(batch, seq, kv_heads, hd).transpose(1, 2)
    q, k = apply_rope(q, cfg["rope_theta"]), apply_rope(k, cfg["rope_theta"])
    k = k.repeat_interleave(heads // kv_heads, dim=1)  # query head h reads KV head h // group
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    visible = j <= i
    if cfg["sliding_window"] > 0:
        visible = visible & (j > i - cfg["sliding_window"])
    scores = scores.masked_fill(~visible, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    out = out.transpose(1, 2).reshape(batch, seq, heads * hd)
    return out @ p[prefix + "o_proj.weight"].T


def swiglu(x, gate, up, down):
    g = x @ gate.T
    return ((g * torch.sigmoid(g)) * (x @ up.T)) @ down.T


def moe(x, p, prefix, cfg, margins):
    """x is (N, D). Returns (output (N, D), aux loss of this layer); appends the smallest gap
    between the top_k-th and the next router probability to `margins`."""
    experts, top_k = cfg["moe"]["num_experts"], cfg["moe"]["top_k"]
    probs = torch.softmax(x @ p[prefix + "block_sparse_moe.gate.weight"].T, dim=-1)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    chosen, chosen_probs = order[:, :top_k], sorted_probs[:, :top_k]
    if top_k < experts:
        margins.append(float((sorted_probs[:, top_k - 1] - sorted_probs[:, top_k]).min()))
    weights = chosen_probs / chosen_probs.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(experts):
        ep = prefix + "block_sparse_moe.experts.%d." % e
        for slot in range(top_k):
            rows = chosen[:, slot] == e
            if rows.any():
                y = swiglu(x[rows], p[ep + "w1.weight"], p[ep + "w3.weight"], p[ep + "w2.weight"])
                out = out.index_add(0, rows.nonzero()[:, 0], weights[rows, slot, None] * y)
    if cfg["moe"]["shared_expert_d_ff"] > 0:
        sp = prefix + "mlp.shared_expert."
        out = out + swiglu(x, p[sp + "gate_proj.weight"], p[sp + "up_proj.weight"],
                           p[sp + "down_proj.weight"])
    share = torch.stack([(chosen == e).sum() for e in range(experts)]).to(x.dtype)
    share = share / (x.shape[0] * top_k)  # f_e: share of the N * top_k assignments
    aux = experts * (share * probs.mean(dim=0)).sum()
    return out, aux


def ffn(x, p, prefix, cfg, margins):
    """x is (B, T, D). Returns (output, aux loss or None)."""
    if cfg["moe"]["num_experts"] == 0:
        return swiglu(x, p[prefix + "mlp.gate_proj.weight"], p[prefix + "mlp.up_proj.weight"],
                      p[prefix + "mlp.down_proj.weight"]), None
    out, aux = moe(x.reshape(-1, x.shape[-1]), p, prefix, cfg, margins)
    return out.view(x.shape), aux


def forward(p, inputs, cfg, margins):
    """inputs is (B, T). Returns (logits (B, T, V), aux loss averaged over MoE layers)."""
    eps = cfg["norm_eps"]
    x = p["model.embed_tokens.weight"][inputs.long()]
    aux_losses = []
    for layer in range(cfg["n_layers"]):
        prefix = "model.layers.%d." % layer
        n1 = rms_norm(x, p[prefix + "input_layernorm.weight"], eps)
        attn = attention(n1, p, prefix + "self_attn.", cfg)
        if cfg["parallel_block"]:
            out, aux = ffn(n1, p, prefix, cfg, margins)
            x = x + attn + out
        else:
            h = x + attn
            out, aux = ffn(rms_norm(h, p[prefix + "post_attention_layernorm.weight"], eps), p,
                           prefix, cfg, margins)
            x = h + out
        if aux is not None:
            aux_losses.append(aux)
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight" if cfg["tie_embeddings"] else "lm_head.weight"]
    aux = torch.stack(aux_losses).mean() if aux_losses else torch.zeros((), dtype=x.dtype)
    return x @ head.T, aux


def losses(p, batch, cfg, margins):
    """Returns (logits, mean cross-entropy, aux loss, objective)."""
    logits, aux = forward(p, batch["inputs"], cfg, margins)
    flat = logits.reshape(-1, logits.shape[-1])
    targets = batch["targets"].reshape(-1).long()
    log_z = torch.logsumexp(flat, dim=-1)
    ce = (log_z - flat.gather(1, targets[:, None])[:, 0]).mean()
    return logits, ce, aux, ce + cfg["moe"]["aux_loss_coef"] * aux


def leaf_parameters(weights, dtype):
    return {name: w.to(dtype).clone().requires_grad_(True) for name, w in weights.items()}


def adamw_curve(weights, batch, case, dtype, margins):
    """Loss and aux loss before each of case['steps'] AdamW updates."""
    cfg, optim = case["model"], case["optim"]
    p = leaf_parameters(weights, dtype)
    excluded = set(case["no_weight_decay"])
    groups = [
        {"params": [w for n, w in p.items() if n not in excluded],
         "weight_decay": optim["weight_decay"]},
        {"params": [w for n, w in p.items() if n in excluded], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=optim["lr"], betas=tuple(optim["betas"]),
                            eps=optim["eps"])
    curve, curve_aux = [], []
    for _ in range(case["steps"]):
        opt.zero_grad()
        _, ce, aux, objective = losses(p, batch, cfg, margins)
        curve.append(float(ce))
        curve_aux.append(float(aux))
        objective.backward()
        opt.step()
    return curve, curve_aux


def check_case(case, weights):
    cfg = case["model"]
    optim = case["optim"]
    if optim["name"] != "adamw" or optim["schedule"] != "constant" or optim["grad_clip"] != 0:
        sys.exit("%s: the generator only knows constant-lr AdamW without clipping" % case["name"])
    missing = {"model.embed_tokens.weight", "model.norm.weight"} - set(weights)
    if missing or (not cfg["tie_embeddings"]) != ("lm_head.weight" in weights):
        sys.exit("%s: weights.safetensors does not match case.json" % case["name"])


def generate(case_dir):
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    weights = read_safetensors(os.path.join(case_dir, "weights.safetensors"))
    batch = read_safetensors(os.path.join(case_dir, "batch.safetensors"))
    check_case(case, weights)
    cfg = case["model"]

    margins = []
    p = leaf_parameters(weights, torch.float64)
    logits, ce, aux, objective = losses(p, batch, cfg, margins)
    objective.backward()
    curve, curve_aux = adamw_curve(weights, batch, case, torch.float64, margins)
    curve32, _ = adamw_curve(weights, batch, case, torch.float32, [])
    if margins and min(margins) < 1e-4:
        sys.exit("%s: a router probability gap of %.2e could flip top-k under fp32 rounding; "
                 "change the case's seed" % (case["name"], min(margins)))

    f32 = torch.float32
    out = {"logits": logits.detach().to(f32),
           "loss": ce.detach().reshape(1).to(f32),
           "aux_loss": aux.detach().reshape(1).to(f32),
           "objective": objective.detach().reshape(1).to(f32),
           "curve": torch.tensor(curve, dtype=f32),
           "curve_aux": torch.tensor(curve_aux, dtype=f32)}
    for name, w in p.items():
        out["grad." + name] = w.grad.to(f32)
    drift = max(abs(a - b) / abs(b) for a, b in zip(curve32, curve))
    metadata = {"generator": "tests/golden/model/generate.py", "torch": torch.__version__,
                "precision": "float64",
                "min_router_margin": ("%.3e" % min(margins)) if margins else "dense",
                "float32_curve_drift": "%.3e" % drift}
    write_safetensors(os.path.join(case_dir, "golden.safetensors"), out, metadata)
    print("%s: loss %.6f aux %.6f curve %.6f -> %.6f; float32 torch drifts %.1e from float64; "
          "min router margin %s" % (case["name"], float(ce), float(aux), curve[0], curve[-1],
                                    drift, metadata["min_router_margin"]))


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = argv[1:] or sorted(os.path.join(here, d) for d in os.listdir(here)
                              if os.path.isfile(os.path.join(here, d, "case.json")))
    if not dirs:
        sys.exit("no case directories: run ms_golden_export %s first" % here)
    for case_dir in dirs:
        generate(case_dir)


if __name__ == "__main__":
    main(sys.argv)

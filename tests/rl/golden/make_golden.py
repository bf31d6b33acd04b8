#!/usr/bin/python3
"""Golden values for lib/rl's losses and advantage estimators, computed independently with
PyTorch (Debian's python3-torch) on padded (batch, length) tensors with masks, the way verl
holds them, and with autograd for the gradients. lib/rl holds responses back to back without
padding; per-token arrays here list the unmasked tokens in row order to match.

    /usr/bin/python3 tests/rl/golden/make_golden.py > tests/rl/golden/rl_golden.json
"""
import json
import math

import torch

torch.set_default_dtype(torch.float64)

# Three responses of lengths 4, 2 and 3, padded to 4. The rows are chosen so that the ratios
# leave the clip range on both sides, the dual clip binds (negative advantage, ratio > 3), and
# one log ratio exceeds verl's clamp of 20. The values leave their clip range both where the
# clipped error is the larger (clipped: no gradient) and where it is the smaller, never on a tie.
LENGTHS = [4, 2, 3]
WIDTH = 4
MASK = torch.tensor([[1.0 if t < n else 0.0 for t in range(WIDTH)] for n in LENGTHS])

OLD = torch.tensor([[-1.0, -2.0, -0.5, -3.0],
                    [-0.7, -1.5, 0.0, 0.0],
                    [-2.0, -0.3, -26.0, 0.0]])
# log ratio per token: +0.5 (1.65, above 1.28), -0.4 (0.67, below 0.8), +0.1, +1.3 (3.67);
#                      -0.05, +0.2; -0.6 (0.55), +1.2 (3.32), +25 (clamped to 20)
NEW = OLD + torch.tensor([[0.5, -0.4, 0.1, 1.3],
                          [-0.05, 0.2, 0.0, 0.0],
                          [-0.6, 1.2, 25.0, 0.0]])
ADV = torch.tensor([[1.5, -0.8, 0.3, -1.2],
                    [0.9, 2.0, 0.0, 0.0],
                    [-0.4, -2.5, 0.7, 0.0]])
REF = OLD + torch.tensor([[0.3, -0.2, 0.0, 0.9],
                          [0.1, -0.6, 0.0, 0.0],
                          [0.25, -1.1, 0.0, 0.0]])
VALUES_NEW = torch.tensor([[0.5, 1.2, -0.3, 0.9],
                           [0.2, 0.8, 0.0, 0.0],
                           [1.5, -0.4, 0.65, 0.0]])
VALUES_OLD = torch.tensor([[0.3, 0.2, -0.2, 1.0],
                           [0.9, 0.7, 0.0, 0.0],
                           [0.4, -0.5, 0.1, 0.0]])
RETURNS = torch.tensor([[1.0, 1.5, 0.5, -0.5],
                        [1.0, 1.0, 0.0, 0.0],
                        [0.0, 0.3, 1.0, 0.0]])
POSITIVE = [1.0, 0.0, 1.0]
NORM_LENGTH = 6.0
MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def flat(t):
    return [t[i, j].item() for i in range(len(LENGTHS)) for j in range(LENGTHS[i])]


def aggregate(loss, mode):
    if mode == "token-mean":
        return (loss * MASK).sum() / MASK.sum()
    if mode == "seq-mean-token-mean":
        per_seq = (loss * MASK).sum(-1) / MASK.sum(-1)
        return per_seq.mean()
    return (loss * MASK).sum() / NORM_LENGTH


def masked_mean(x):
    return ((x * MASK).sum() / MASK.sum()).item()


def policy(mode, clip_low, clip_high, dual):
    logp = NEW.clone().requires_grad_(True)
    log_ratio = torch.clamp(logp - OLD, -20.0, 20.0)
    ratio = torch.exp(log_ratio)
    unclipped = -ADV * ratio
    clipped = -ADV * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pessimistic = torch.maximum(unclipped, clipped)
    dual_bound = -ADV * dual
    with_dual = torch.where(ADV < 0, torch.minimum(dual_bound, pessimistic), pessimistic)
    loss = aggregate(with_dual, mode)
    loss.backward()
    return {
        "loss": loss.item(),
        "gradient": flat(logp.grad),
        "clip_fraction": masked_mean((clipped > unclipped).double()),
        "dual_clip_fraction": masked_mean(((pessimistic > dual_bound) & (ADV < 0)).double()),
        "kl": masked_mean(-log_ratio.detach()),
    }


def k3(mode, coef):
    logp = NEW.clone().requires_grad_(True)
    kl = torch.clamp(REF - logp, -20.0, 20.0)
    estimate = torch.clamp(torch.exp(kl) - kl - 1.0, -10.0, 10.0)
    loss = coef * aggregate(estimate, mode)
    loss.backward()
    return {"loss": loss.item(), "gradient": flat(logp.grad), "kl": masked_mean(estimate.detach())}


def value(mode, clip_range):
    v = VALUES_NEW.clone().requires_grad_(True)
    v_clipped = torch.max(torch.min(v, VALUES_OLD + clip_range), VALUES_OLD - clip_range)
    plain = (v - RETURNS) ** 2
    held = (v_clipped - RETURNS) ** 2
    loss = 0.5 * aggregate(torch.max(plain, held), mode)
    loss.backward()
    return {"loss": loss.item(), "gradient": flat(v.grad),
            "clip_fraction": masked_mean((held > plain).double())}


def positive_nll(coef):
    logp = NEW.clone().requires_grad_(True)
    rows = torch.tensor(POSITIVE).unsqueeze(-1) * MASK
    loss = coef * -(logp * rows).sum() / rows.sum()
    loss.backward()
    return {"loss": loss.item(), "gradient": flat(logp.grad)}


def grpo(scores, group_size, eps, scale):
    s = torch.tensor(scores).view(-1, group_size)
    if group_size == 1:
        mean, std = torch.zeros_like(s), torch.ones_like(s)
    else:
        mean = s.mean(-1, keepdim=True).expand_as(s)
        std = s.std(-1, keepdim=True).expand_as(s)  # unbiased, as torch.std's default
    out = (s - mean) / (std + eps) if scale else s - mean
    return out.reshape(-1).tolist()


def gae(rewards, values, gamma, lambdas):
    # Padded rows and a backwards recursion over columns, with verl's masking.
    r, v = torch.tensor(rewards), torch.tensor(values)
    lam = torch.tensor(lambdas)
    next_values = torch.zeros(len(LENGTHS))
    last = torch.zeros(len(LENGTHS))
    adv = torch.zeros_like(r)
    for t in reversed(range(WIDTH)):
        m = MASK[:, t]
        delta = r[:, t] + gamma * next_values - v[:, t]
        new_last = delta + gamma * lam * last
        next_values = v[:, t] * m + (1 - m) * next_values
        last = new_last * m + (1 - m) * last
        adv[:, t] = last
    return flat(adv), flat(adv + v)


def mc_returns(rewards, gamma):
    r = torch.tensor(rewards)
    out = torch.zeros_like(r)
    for i, n in enumerate(LENGTHS):
        discounts = torch.tensor([gamma ** k for k in range(n)])
        for t in range(n):
            out[i, t] = (r[i, t:n] * discounts[: n - t]).sum()
    return flat(out)


def whiten(values):
    x = torch.tensor(values)
    return ((x - x.mean()) / torch.sqrt(x.var() + 1e-8)).tolist()


def main():
    token_rewards = [[0.0, 0.0, 0.1, 1.0], [0.0, -1.0, 0.0, 0.0], [0.2, 0.0, 0.5, 0.0]]
    token_values = VALUES_OLD.tolist()
    lambdas = [0.95, 0.5, 0.0]
    gae_adv, gae_ret = gae(token_rewards, token_values, 0.99, lambdas)
    critic_adv, critic_ret = gae(token_rewards, token_values, 1.0, [1.0, 1.0, 1.0])
    policy_adv, _ = gae(token_rewards, token_values, 1.0, lambdas)
    golden = {
        "generator": "tests/rl/golden/make_golden.py (torch " + torch.__version__ + ")",
        "lengths": LENGTHS,
        "old_log_probs": flat(OLD), "log_probs": flat(NEW), "advantages": flat(ADV),
        "ref_log_probs": flat(REF), "values": flat(VALUES_NEW), "old_values": flat(VALUES_OLD),
        "returns": flat(RETURNS), "positive": POSITIVE, "norm_length": NORM_LENGTH,
        "policy": [], "k3": [], "value": [],
        "positive_nll": {"coef": 0.1, **positive_nll(0.1)},
    }
    for mode in MODES:
        for clip_low, clip_high, dual in [(0.2, 0.28, 3.0), (0.2, 0.2, 3.0)]:
            golden["policy"].append({"mode": mode, "clip_low": clip_low, "clip_high": clip_high,
                                     "dual": dual, **policy(mode, clip_low, clip_high, dual)})
        golden["k3"].append({"mode": mode, "coef": 0.1, **k3(mode, 0.1)})
        golden["value"].append({"mode": mode, "clip_range": 0.5, **value(mode, 0.5)})
    grpo_scores = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.0, 0.2, 0.9, 0.4]
    golden["grpo"] = [
        {"scores": grpo_scores, "group_size": 4, "epsilon": 1e-6, "scale_by_std": True,
         "advantages": grpo(grpo_scores, 4, 1e-6, True)},
        {"scores": grpo_scores, "group_size": 4, "epsilon": 1e-6, "scale_by_std": False,
         "advantages": grpo(grpo_scores, 4, 1e-6, False)},
        {"scores": grpo_scores[:3], "group_size": 1, "epsilon": 1e-6, "scale_by_std": True,
         "advantages": grpo(grpo_scores[:3], 1, 1e-6, True)},
    ]
    golden["gae"] = {
        "rewards": flat(torch.tensor(token_rewards)), "values": flat(VALUES_OLD),
        "gamma": 0.99, "lambdas": lambdas, "advantages": gae_adv, "returns": gae_ret,
        "whitened_advantages": whiten(gae_adv),
        "decoupled": {"gamma": 1.0, "critic_lambda": 1.0, "policy_lambdas": lambdas,
                      "advantages": policy_adv, "returns": critic_ret},
        "monte_carlo_gamma": 0.9,
        "monte_carlo_returns": mc_returns(token_rewards, 0.9),
        "monte_carlo_returns_gamma1": mc_returns(token_rewards, 1.0),
    }
    golden["length_adaptive_lambda"] = [
        {"length": n, "alpha": 0.05, "lambda": min(1.0, max(0.0, 1.0 - 1.0 / (0.05 * n)))}
        for n in [1, 10, 20, 21, 40, 100, 1000]]
    print(json.dumps(golden, indent=1))


if __name__ == "__main__":
    main()

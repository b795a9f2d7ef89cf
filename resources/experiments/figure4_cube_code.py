#!/usr/bin/env python3
"""What the cheapest position code of a Free Transformer can reach on the synthetic task
(docs/figure4.md, "What a product-of-bits encoder can afford at 1/8 bit").

The encoder's posterior at a position is a product of independent bits. The cheapest way for it
to say "the target starts here" is a cube: k bits fixed to a pattern at the position that
announces the start (KL k ln 2 there), the prior everywhere else (KL 0). Under the batch-mean
free bits a position t then costs, on average over the data, P(start at t) k ln 2 = k ln 2 / 57
nats, which must stay under kappa (1/8 bit = 0.0866 nats): k <= 7.

The best decoder for that code starts the target at t with probability
    q_t / (q_t + (1 - q_t) 2^-k_t),   q_t = 1 / (57 - t) (the data's hazard),
when Z_t falls in the cube (a prior sample does so with probability 2^-k_t), never otherwise, and
at the last start when nothing has started it. This script draws Z from the prior, shares it
within groups of 8 (Figure 4's fixed-Z groups), and reports the agreement of the groups and the
total variation of the starts from the data's uniform ones, for constant k and for
k_t = log2(57 - t) + e. No model is trained: it bounds what this code family gives.

Usage: python3 resources/experiments/figure4_cube_code.py   (needs numpy; about a minute)
"""
import math

import numpy as np

STARTS = 57
GROUP = 8


def simulate(k_of_t, groups, rng):
    agree, starts = [], []
    for _ in range(groups):
        match = rng.random(STARTS) < 2.0 ** -k_of_t  # one prior Z for the whole group
        group = []
        for _ in range(GROUP):
            s = STARTS - 1
            for t in range(STARTS - 1):
                q, r = 1.0 / (STARTS - t), 2.0 ** -k_of_t[t]
                if match[t] and rng.random() < q / (q + (1 - q) * r):
                    s = t
                    break
            group.append(s)
        g = np.array(group)
        starts += group
        agree.append(((g[:, None] == g[None, :]).sum() - GROUP) / (GROUP * (GROUP - 1)))
    hist = np.bincount(starts, minlength=STARTS) / len(starts)
    return float(np.mean(agree)), 0.5 * float(np.abs(hist - 1.0 / STARTS).sum())


def main():
    rng = np.random.default_rng(0)
    kappa = math.log(2) / 8
    print(f"kappa 1/8 bit = {kappa:.4f} nats per position (batch mean)")
    print("constant cube size k:")
    for k in (3, 4, 5, 6, 7, 8, 10):
        a, tv = simulate(np.full(STARTS, float(k)), 1500, rng)
        cost = k * math.log(2) / STARTS
        print(f"  k = {k:2d}: KL per position {cost:.4f} ({'within' if cost <= kappa else 'over'} kappa)"
              f"  agree fixed {a:.2f}  TV of starts {tv:.2f}")
    print("cube size k_t = log2(57 - t) + e, rounded:")
    for e in (0, 1, 2, 3):
        k = np.array([max(1, round(math.log2(STARTS - t) + e)) for t in range(STARTS)], dtype=float)
        a, tv = simulate(k, 1500, rng)
        cost = k.max() * math.log(2) / STARTS
        print(f"  e = {e}: largest KL per position {cost:.4f} ({'within' if cost <= kappa else 'over'} kappa)"
              f"  agree fixed {a:.2f}  TV of starts {tv:.2f}")


if __name__ == "__main__":
    main()

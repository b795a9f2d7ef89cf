"""The PyTorch peer of `ftx bench train`: a straightforward eager implementation of the same model
(ft_reference.py: dense one-hot Z and dense G for the binary mapper, as BASELINE.md describes),
timed the same way (median step time over timed steps after warm-up, batch 64, T = 65, AdamW).

Not part of the product or its tests; run by hand to compare on the same machine:
    OMP_WAIT_POLICY=PASSIVE python3 resources/pytorch_peer/bench_pytorch.py --latent-bits 8
--latent-bits 0 times the plain decoder (no encoder, no latent)."""
import argparse, json, math, os, statistics, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ft_reference as ft  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latent-bits", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    H = max(a.latent_bits, 1)
    m = ft.FT(H=H)
    params = [p for n, p in m.named_parameters() if a.latent_bits > 0 or not n.startswith(("enc", "zeta", "post"))]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(0)
    kappa = math.log(2) / 8
    times = []
    for i in range(a.warmup + a.steps):
        x = ft.make_batch(a.batch, gen)
        inp, tgt = x[:, :-1], x[:, 1:]
        t0 = time.perf_counter()
        if a.latent_bits > 0:
            ce, kl, excess = m.forward_train(inp, tgt, kappa)
            loss = ce + excess
        else:
            h = m.first_half(inp)
            logits = m.second_half(h, torch.zeros_like(h))
            loss = F.cross_entropy(logits.reshape(-1, ft.V), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    T = inp.shape[1]
    print(json.dumps({"impl": "pytorch-eager", "torch": torch.__version__, "threads": a.threads,
                      "latent_bits": a.latent_bits, "batch": a.batch, "seq_len": T,
                      "step_ms_median": med * 1e3, "tokens_per_s": a.batch * T / med}))


if __name__ == "__main__":
    main()

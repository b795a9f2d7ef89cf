"""The PyTorch peer of `ftx train --init <SmolLM2> --dataset text`: the same model shape
(SmolLM2-135M by default: 30 blocks, D 576, 9 query / 3 key-value heads, SwiGLU 1536, vocabulary
49152, tied embeddings, RoPE theta 100000), plain (--latent-bits 0, the baseline) or as a Free
Transformer (H = 16 by default: encoder block on the middle block's output, readout, dense
one-hot Z with the pass-through gradient of the dense binary mapper as in ft_reference.py), the same
batch and sequence length, AdamW with gradient clipping, eager fp32 on the CPU (--precision bf16:
the step under torch.autocast("cpu", bfloat16), fp32 weights and AdamW state, as ftx's --precision
bf16). Reports the median
step time and tokens/s (batch * (seq_len - 1) predicted tokens per step) as one JSON line.

Weights are random (throughput does not depend on them). Batches are uniform random tokens, or
windows of real text with --text FILE --tokenizer tokenizer.json (the `tokenizers` package).

Not part of the product or its tests; run by hand, beside (never during) an ftx training:
    OMP_WAIT_POLICY=PASSIVE python3 resources/pytorch_peer/train_text.py --latent-bits 0 --steps 5
    python3 resources/pytorch_peer/train_text.py --latent-bits 16 --batch 8 --seq-len 256"""
import argparse, json, math, os, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_reference import RMSNorm, apply_rope, rope_tables  # noqa: E402


class Block(nn.Module):
    """A Llama block with grouped-query attention; xkv (keys/values input) may differ from xq."""

    def __init__(s, D, nh, nkv, hf):
        super().__init__()
        s.nh, s.nkv, s.hd = nh, nkv, D // nh
        s.n1, s.n2 = RMSNorm(D, 1e-5), RMSNorm(D, 1e-5)
        s.q = nn.Linear(D, nh * s.hd, bias=False)
        s.k = nn.Linear(D, nkv * s.hd, bias=False)
        s.v = nn.Linear(D, nkv * s.hd, bias=False)
        s.o = nn.Linear(nh * s.hd, D, bias=False)
        s.g, s.u, s.d = nn.Linear(D, hf, bias=False), nn.Linear(D, hf, bias=False), nn.Linear(hf, D, bias=False)

    def forward(s, xq, xkv, cos, sin, causal):
        B, T, D = xq.shape
        hq = s.n1(xq)
        hkv = hq if xkv is None else s.n1(xkv)
        q = apply_rope(s.q(hq).view(B, T, s.nh, s.hd).transpose(1, 2), cos, sin)
        k = apply_rope(s.k(hkv).view(B, T, s.nkv, s.hd).transpose(1, 2), cos, sin)
        v = s.v(hkv).view(B, T, s.nkv, s.hd).transpose(1, 2)
        rep = s.nh // s.nkv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = xq + s.o(a.transpose(1, 2).reshape(B, T, s.nh * s.hd))
        h = s.n2(x)
        return x + s.d(F.silu(s.g(h)) * s.u(h))


class TextModel(nn.Module):
    def __init__(s, a):
        super().__init__()
        D, L, H = a.dim, a.layers, a.latent_bits
        s.H, s.L, s.V, s.k = H, L, a.vocab, L // 2
        s.emb = nn.Embedding(a.vocab, D)
        s.blocks = nn.ModuleList([Block(D, a.heads, a.kv_heads, a.ffn) for _ in range(L)])
        s.norm = RMSNorm(D, 1e-5)
        cos, sin = rope_tables(a.seq_len, D // a.heads, theta=a.rope_theta)
        s.register_buffer("cos", cos), s.register_buffer("sin", sin)
        if H > 0:
            s.zeta = nn.Parameter(torch.randn(D))
            s.enc = Block(D, a.heads, a.kv_heads, a.ffn)
            s.enc_norm = RMSNorm(D, 1e-5)
            s.readout = nn.Linear(D, H, bias=False)
            s.post = nn.Parameter(torch.zeros(2 ** H, D))
            U = ((torch.arange(2 ** H)[:, None] >> torch.arange(H)[None]) & 1).float()  # (2^H, H)
            s.register_buffer("U", U)
        for mod in s.modules():  # Llama's init (std 0.02): tied logits start near uniform
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)

    def loss(s, x, y, kappa):
        T = x.shape[1]
        cos, sin = s.cos[:T], s.sin[:T]
        h = s.emb(x)
        for b in s.blocks[: s.k]:
            h = b(h, None, cos, sin, True)
        kl = torch.zeros(())
        excess = torch.zeros(())
        kv = None
        if s.H > 0:
            z = s.zeta.view(1, 1, -1).expand_as(h)
            lg = s.readout(s.enc_norm(s.enc(z, h, cos, sin, False)))  # (B, T, H)
            p = torch.sigmoid(lg)
            bits = (torch.rand_like(p) < p).float()
            idx = (bits * (2 ** torch.arange(s.H)).float()).sum(-1).long()
            # Dense binary mapper: G (B, T, 2^H) only for the pass-through gradient; the value is post[idx].
            G = (F.logsigmoid(lg) @ s.U.t() + F.logsigmoid(-lg) @ (1 - s.U).t()).exp()
            R = s.post[idx] + (G - G.detach()) @ s.post
            kv = h + R
            kl_t = (math.log(2) + p * F.logsigmoid(lg) + (1 - p) * F.logsigmoid(-lg)).sum(-1)
            kl, excess = kl_t.mean(), F.relu(kl_t - kappa).mean()
        for i, b in enumerate(s.blocks[s.k:]):
            h = b(h, kv if i == 0 else None, cos, sin, True)
        logits = F.linear(s.norm(h), s.emb.weight)  # tied embeddings
        ce = F.cross_entropy(logits.reshape(-1, s.V), y.reshape(-1))
        return ce, kl, ce + excess


def batches(a, gen):
    if not a.text:
        while True:
            yield torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=gen)
    from tokenizers import Tokenizer
    ids = torch.tensor(Tokenizer.from_file(a.tokenizer).encode(open(a.text, encoding="utf-8").read()).ids)
    if len(ids) <= a.seq_len:
        sys.exit(f"{a.text}: fewer than {a.seq_len + 1} tokens")
    while True:
        starts = torch.randint(0, len(ids) - a.seq_len, (a.batch,), generator=gen)
        yield torch.stack([ids[s:s + a.seq_len] for s in starts.tolist()])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latent-bits", type=int, default=16)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--dim", type=int, default=576)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--rope-theta", type=float, default=100000.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256, help="tokens per sequence (seq_len - 1 predicted)")
    ap.add_argument("--kappa-bits", type=float, default=0.5)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps")
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch threads (default: every CPU, as ftx's OpenMP; PyTorch alone takes physical cores)")
    ap.add_argument("--text", help="a UTF-8 text file to draw windows from (else random tokens)")
    ap.add_argument("--tokenizer", help="tokenizer.json for --text")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(1)
    m = TextModel(a)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    kappa = a.kappa_bits * math.log(2)
    data = batches(a, gen)
    times, last = [], None
    for i in range(a.warmup + a.steps):
        x = next(data)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            ce, kl, loss = m.loss(x[:, :-1], x[:, 1:], kappa)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(dt)
        last = (ce.item(), kl.item())
        print(f"step {i + 1}: ce {last[0]:.4f} kl {last[1]:.4f} {dt:.2f} s", file=sys.stderr, flush=True)
    med = statistics.median(times)
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "latent_bits": a.latent_bits, "precision": a.precision, "params": sum(p.numel() for p in params),
                      "batch": a.batch, "seq_len": a.seq_len, "data": "text" if a.text else "random",
                      "step_s": med, "tokens_per_s": a.batch * (a.seq_len - 1) / med, "last_ce": last[0]}))


if __name__ == "__main__":
    main()

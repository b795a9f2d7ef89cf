import os, sys, math, time, json, argparse
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch
import torch.nn as nn
import torch.nn.functional as F
torch.set_num_threads(1)

VOCAB = "_!>" + "".join(chr(65 + i) for i in range(26))
V = len(VOCAB)
US, EX, GT = 0, 1, 2
BODY = 64
TLEN = 8
NPOS = BODY - TLEN + 1  # 57


def make_batch(B, gen):
    letters = torch.randint(0, 26, (B,), generator=gen) + 3
    pos = torch.randint(0, NPOS, (B,), generator=gen)
    body = torch.zeros(B, BODY, dtype=torch.long)
    ar = torch.arange(BODY)
    m = (ar[None] >= pos[:, None]) & (ar[None] < pos[:, None] + TLEN)
    body = torch.where(m, letters[:, None].expand(B, BODY), body)
    noise = torch.rand(B, BODY, generator=gen) < 1.0 / 16
    body = torch.where(noise, torch.full_like(body, EX), body)
    seq = torch.cat([letters[:, None], torch.full((B, 1), GT, dtype=torch.long), body], 1)
    return seq  # (B, 66)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__(); self.w = nn.Parameter(torch.ones(d)); self.eps = eps
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def rope_tables(T, hd, theta=10000.0):
    inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
    f = torch.arange(T).float()[:, None] * inv[None]
    return f.cos(), f.sin()


def apply_rope(x, cos, sin):  # x (B, h, T, hd), half-split convention
    x1, x2 = x.chunk(2, -1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


class Block(nn.Module):
    def __init__(s, D, nh, hf):
        super().__init__()
        s.n1 = RMSNorm(D); s.n2 = RMSNorm(D); s.nh = nh
        s.q = nn.Linear(D, D, bias=False); s.k = nn.Linear(D, D, bias=False)
        s.v = nn.Linear(D, D, bias=False); s.o = nn.Linear(D, D, bias=False)
        s.g = nn.Linear(D, hf, bias=False); s.u = nn.Linear(D, hf, bias=False); s.d = nn.Linear(hf, D, bias=False)

    def forward(s, xq, xkv, cos, sin, causal):
        B, T, D = xq.shape
        hq = s.n1(xq)
        hkv = hq if xkv is None else s.n1(xkv)
        hd = D // s.nh
        q = s.q(hq).view(B, T, s.nh, hd).transpose(1, 2)
        k = s.k(hkv).view(B, T, s.nh, hd).transpose(1, 2)
        v = s.v(hkv).view(B, T, s.nh, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin); k = apply_rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = xq + s.o(a.transpose(1, 2).reshape(B, T, D))
        h = s.n2(x)
        return x + s.d(F.silu(s.g(h)) * s.u(h))


class FT(nn.Module):
    def __init__(s, H=8, D=128, L=4, nh=4, hf=344, Tmax=66, vocab=V):
        super().__init__()
        s.H, s.D, s.L, s.vocab = H, D, L, vocab
        s.emb = nn.Embedding(vocab, D)
        s.blocks = nn.ModuleList([Block(D, nh, hf) for _ in range(L)])
        s.norm = RMSNorm(D); s.head = nn.Linear(D, vocab, bias=False)
        s.zeta = nn.Parameter(torch.randn(D))
        s.enc = Block(D, nh, hf); s.enc_norm = RMSNorm(D)
        s.enc_out = nn.Linear(D, H, bias=True)
        s.post = nn.Parameter(torch.zeros(2 ** H, D))
        cos, sin = rope_tables(Tmax, D // nh)
        s.register_buffer("cos", cos); s.register_buffer("sin", sin)
        U = ((torch.arange(2 ** H)[:, None] >> torch.arange(H)[None]) & 1).float()  # (C, H)
        s.register_buffer("U", U)

    def first_half(s, x):
        T = x.shape[1]
        cos, sin = s.cos[:T], s.sin[:T]
        h = s.emb(x)
        for b in s.blocks[: s.L // 2]:
            h = b(h, None, cos, sin, True)
        return h

    def encode(s, h):
        B, T, D = h.shape
        cos, sin = s.cos[:T], s.sin[:T]
        z = s.zeta.view(1, 1, D).expand(B, T, D)
        y = s.enc(z, h, cos, sin, False)
        return s.enc_out(s.enc_norm(y))  # (B, T, H) logits

    def second_half(s, h, R):
        T = h.shape[1]
        cos, sin = s.cos[:T], s.sin[:T]
        h = s.blocks[s.L // 2](h, h + R, cos, sin, True)
        for b in s.blocks[s.L // 2 + 1:]:
            h = b(h, None, cos, sin, True)
        return s.head(s.norm(h))

    def forward_train(s, x, y, kappa):
        h = s.first_half(x)
        lg = s.encode(h)
        p = torch.sigmoid(lg)
        bits = (torch.rand_like(p) < p).float()
        idx = (bits * (2 ** torch.arange(s.H, device=x.device)).float()).sum(-1).long()
        logG = F.logsigmoid(lg) @ s.U.t() + F.logsigmoid(-lg) @ (1 - s.U).t()  # (B,T,C)
        G = logG.exp()
        Y = F.one_hot(idx, 2 ** s.H).float()
        Ys = Y + G - G.detach()
        R = Ys @ s.post
        logits = s.second_half(h, R)
        ce = F.cross_entropy(logits.reshape(-1, s.vocab), y.reshape(-1))
        # KL_t = sum_h log2 - Hb(p)
        kl_t = (math.log(2) + p * F.logsigmoid(lg) + (1 - p) * F.logsigmoid(-lg)).sum(-1)
        excess = F.relu(kl_t - kappa).mean()
        return ce, kl_t.mean(), excess

    @torch.no_grad()
    def generate(s, prompts, codes, gen):
        # prompts (B, 2), codes (B, 66) code indices (uniform prior); full recompute
        x = prompts
        for t in range(BODY):
            T = x.shape[1]
            h = s.first_half(x)
            R = s.post[codes[:, :T]]
            logits = s.second_half(h, R)[:, -1]
            nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=gen)
            x = torch.cat([x, nxt], 1)
        return x


def init_model(m, a, seed):
    g = torch.Generator().manual_seed(seed)
    std = a.std
    rs = 1.0 / math.sqrt(2 * m.L)
    for name, p in m.named_parameters():
        if p.dim() == 2 and name != "post":
            sd = std * (rs if (name.endswith("o.weight") or name.endswith("d.weight")) else 1.0)
            if name.startswith("enc_out"):
                sd = std * a.readout_std_mult
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * sd)
    with torch.no_grad():
        m.zeta.copy_(torch.randn(m.D, generator=g))
        m.enc_out.bias.fill_(a.bit_bias)
        C, H, D = 2 ** m.H, m.H, m.D
        if a.post_init == "normal":
            m.post.copy_(torch.randn(C, D, generator=g) * a.post_std)
        elif a.post_init == "bitlin":
            v = torch.randn(H, D, generator=g) * a.post_std
            m.post.copy_((2 * m.U - 1) @ v)
        elif a.post_init == "bitlin_noise":
            v = torch.randn(H, D, generator=g) * a.post_std
            m.post.copy_((2 * m.U - 1) @ v + torch.randn(C, D, generator=g) * a.post_std)
        else:
            raise ValueError(a.post_init)


def possible_starts(body, letter):
    # body: list of ints length 64
    if len(body) != BODY: return None
    for c in body:
        if c not in (US, EX, letter): return None
    lp = [i for i, c in enumerate(body) if c == letter]
    if len(lp) < 4: return None
    lo, hi = min(lp), max(lp)
    if hi - lo >= TLEN: return None
    starts = []
    for st in range(max(0, hi - TLEN + 1), min(lo, NPOS - 1) + 1):
        if all(body[j] in (letter, EX) for j in range(st, st + TLEN)):
            starts.append(st)
    return set(starts) if starts else None


def group_metrics(seqs, letter):
    res = [possible_starts(s[2:].tolist(), letter) for s in seqs]
    valid = [r for r in res if r is not None]
    vs = [(s, r) for s, r in zip(seqs, res) if r is not None]
    agree, pairs, nj = 0, 0, []
    for i in range(len(vs)):
        for j in range(i + 1, len(vs)):
            pairs += 1
            if vs[i][1] & vs[j][1]: agree += 1
    # noise agreement: '!' positions outside target windows (union of both)
    def noise_set(s, r):
        lo, hi = min(r), max(r) + TLEN
        b = s[2:].tolist()
        return set(k for k, c in enumerate(b) if c == EX and not (lo <= k < hi))
    for i in range(len(vs)):
        for j in range(i + 1, len(vs)):
            lo = min(min(vs[i][1]), min(vs[j][1])); hi = max(max(vs[i][1]), max(vs[j][1])) + TLEN
            a = set(k for k in noise_set(*vs[i]) if not (lo <= k < hi))
            b = set(k for k in noise_set(*vs[j]) if not (lo <= k < hi))
            nj.append(1.0 if not a and not b else len(a & b) / len(a | b))
    return len(valid), len(seqs), (agree / pairs if pairs else float("nan")), (sum(nj) / len(nj) if nj else float("nan")), vs


def evaluate(m, H, n_fixed=8, n_indep=2, gsize=8, seed=123):
    g = torch.Generator().manual_seed(seed)
    C = 2 ** H
    prompts, codes, kinds = [], [], []
    for gi in range(n_fixed + n_indep):
        letter = int(torch.randint(0, 26, (1,), generator=g)) + 3
        pr = torch.tensor([[letter, GT]] * gsize)
        if gi < n_fixed:
            z = torch.randint(0, C, (1, 66), generator=g).expand(gsize, 66)
        else:
            z = torch.randint(0, C, (gsize, 66), generator=g)
        prompts.append(pr); codes.append(z); kinds.append("F" if gi < n_fixed else "I")
    m.eval()
    out = m.generate(torch.cat(prompts), torch.cat(codes), g)
    m.train()
    res = {"F": [], "I": []}
    nval, ntot = 0, 0
    starts_f = []
    for gi in range(n_fixed + n_indep):
        seqs = out[gi * gsize:(gi + 1) * gsize]
        nv, nt, ag, nj, vs = group_metrics(seqs, int(prompts[gi][0, 0]))
        nval += nv; ntot += nt
        res[kinds[gi]].append((ag, nj))
        if kinds[gi] == "F":
            starts_f.append([min(r) for _, r in vs])
    def avg(lst, k):
        v = [x[k] for x in lst if x[k] == x[k]]
        return sum(v) / len(v) if v else float("nan")
    return dict(valid=nval / ntot, agree_fixed=avg(res["F"], 0), agree_indep=avg(res["I"], 0),
                noise_fixed=avg(res["F"], 1), noise_indep=avg(res["I"], 1), starts=starts_f[:3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="run")
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--enc_lr_mult", type=float, default=1.0)
    ap.add_argument("--post_lr_mult", type=float, default=None)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--cosine", type=int, default=0)
    ap.add_argument("--min_lr_frac", type=float, default=0.1)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--post_wd", type=float, default=None)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--readout_std_mult", type=float, default=1.0)
    ap.add_argument("--bit_bias", type=float, default=0.0)
    ap.add_argument("--post_init", default="normal")
    ap.add_argument("--post_std", type=float, default=0.02)
    ap.add_argument("--kappa_bits", type=float, default=0.125)
    ap.add_argument("--kappa_start_bits", type=float, default=None)
    ap.add_argument("--kappa_decay_steps", type=int, default=0)
    ap.add_argument("--kappa_hold_steps", type=int, default=0)
    ap.add_argument("--eval_every", type=int, default=200)
    ap.add_argument("--n_fixed", type=int, default=8)
    ap.add_argument("--n_indep", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", default=None)
    ap.add_argument("--resume", default=None)
    ap.add_argument("--start_step", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    m = FT(H=a.H)
    init_model(m, a, a.seed)
    encp, postp, dec_decay, dec_nodecay, enc_decay, enc_nodecay = [], [], [], [], [], []
    for n, p in m.named_parameters():
        is_enc = n.startswith("enc") or n == "zeta"
        if n == "post":
            postp.append(p)
        elif is_enc:
            (enc_decay if p.dim() == 2 else enc_nodecay).append(p)
        else:
            (dec_decay if p.dim() == 2 else dec_nodecay).append(p)
    pm = a.post_lr_mult if a.post_lr_mult is not None else a.enc_lr_mult
    pwd = a.post_wd if a.post_wd is not None else a.wd
    groups = [dict(params=dec_decay, weight_decay=a.wd, mult=1.0), dict(params=dec_nodecay, weight_decay=0.0, mult=1.0),
              dict(params=enc_decay, weight_decay=a.wd, mult=a.enc_lr_mult), dict(params=enc_nodecay, weight_decay=0.0, mult=a.enc_lr_mult),
              dict(params=postp, weight_decay=pwd, mult=pm)]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    if a.resume:
        ck = torch.load(a.resume)
        m.load_state_dict(ck["model"]); opt.load_state_dict(ck["opt"])
    gen = torch.Generator().manual_seed(1000 + a.seed + a.start_step)
    LN2 = math.log(2)
    logf = open(f"/tmp/research/logs/{a.name}.log", "w")
    def log(s):
        print(s); logf.write(s + "\n"); logf.flush()
    log(json.dumps(vars(a)))
    t0 = time.time()
    acc = dict(ce=0.0, kl=0.0, ex=0.0, n=0)
    hist = []
    for step in range(a.start_step + 1, a.steps + 1):
        # lr schedule
        if step <= a.warmup:
            f = step / a.warmup
        elif a.cosine:
            pr = (step - a.warmup) / max(1, a.steps - a.warmup)
            f = a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * pr))
        else:
            f = 1.0
        for gr in opt.param_groups:
            gr["lr"] = a.lr * f * gr["mult"]
        # kappa schedule
        if a.kappa_start_bits is not None and step <= a.kappa_hold_steps + a.kappa_decay_steps:
            if step <= a.kappa_hold_steps:
                kb = a.kappa_start_bits
            else:
                pr = (step - a.kappa_hold_steps) / max(1, a.kappa_decay_steps)
                # geometric interpolation in bits
                kb = a.kappa_start_bits * (a.kappa_bits / a.kappa_start_bits) ** pr
        else:
            kb = a.kappa_bits
        kappa = kb * LN2
        seq = make_batch(a.batch, gen)
        x, y = seq[:, :-1], seq[:, 1:]
        ce, kl, ex = m.forward_train(x, y, kappa)
        loss = ce + ex
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(m.parameters(), a.clip if a.clip > 0 else 1e9)
        opt.step()
        acc["ce"] += ce.item(); acc["kl"] += kl.item(); acc["ex"] += ex.item(); acc["n"] += 1
        if step % 50 == 0:
            n = acc["n"]
            log(f"step {step} t {time.time()-t0:.0f}s ce {acc['ce']/n:.4f} kl {acc['kl']/n:.4f} ex {acc['ex']/n:.4f} kappa {kappa:.4f} gn {gn:.3f}")
            acc = dict(ce=0.0, kl=0.0, ex=0.0, n=0)
        if step % a.eval_every == 0 or step == a.steps:
            te = time.time()
            r = evaluate(m, a.H, a.n_fixed, a.n_indep)
            r.update(step=step, wall=round(time.time() - t0), eval_s=round(time.time() - te, 1))
            log("EVAL " + json.dumps(r))
            hist.append(r)
    torch.save(dict(model=m.state_dict(), opt=opt.state_dict()), a.save or f"/tmp/research/ckpt_{a.name}.pt")
    log("DONE " + json.dumps(dict(wall=round(time.time() - t0))))


if __name__ == "__main__":
    main()

"""The PyTorch peer of `ftx bench train`: a straightforward eager implementation of the same model
(ft_reference.py: dense one-hot Z and dense G for the binary mapper, as docs/performance.md describes),
timed the same way (median step time over timed steps after warm-up, AdamW, gradient clipping)
and reported with the same JSON fields (tokens_per_s, model_flops_per_token, model_tflops, mfu;
on the CPU the GEMM peak this PyTorch reaches at the step's precision and the step's fraction of
it, gemm_peak_tflops and fraction_of_gemm_peak, measured as `ftx bench train` measures its own).

With --generate, the peer of `ftx bench generate`: greedy generation of --batch sequences over
--len positions (the first token 0) the way a script without a KV cache does it, one full forward
over the prefix at every position under torch.no_grad(); for a Free Transformer Z comes from the
prior: uniform random codes, gathered from the post-sampler rows as ft_reference.FT.generate does
(no one-hot). Median time of whole runs over --steps timed runs (default 3) after --warmup
(default 1), with the same fields as ftx (tokens_per_s = batch * len / median).

Shape options reshape the `small` model; when the vocabulary or the length is not the synthetic
task's (29, T = 65), the data are uniform random tokens (throughput does not depend on them).
--latent-bits 0 times the plain decoder (no encoder, no latent). On CUDA the default precision is
tf32 (as ftx's CUDA backend); bf16 runs the forward under torch.autocast (CUDA or CPU). AdamW is the eager
(non-fused) implementation, PyTorch's default.

Not part of the product or its tests; run by hand to compare on the same machine:
    OMP_WAIT_POLICY=PASSIVE python3 resources/pytorch_peer/bench_pytorch.py --latent-bits 8
    python3 resources/pytorch_peer/bench_pytorch.py --device cuda --latent-bits 16 --precision bf16
    python3 resources/pytorch_peer/bench_pytorch.py --generate --latent-bits 8 --batch 64 --len 66"""
import argparse, contextlib, json, math, os, statistics, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ft_reference as ft  # noqa: E402

SYNTHETIC_T = ft.BODY + 1  # 65 predicted positions of a 66-token sequence

# Dense peak TFLOP/s (no sparsity) by substring of the CUDA device name, as in app/cmd_bench.cpp.
# Source: NVIDIA H100, H200 and A100 datasheets. NVL boards and anything else: unknown.
PEAKS = [("H100 PCIe", dict(fp32=51.2, tf32=378.0, bf16=756.0)),
         ("H100 80GB HBM3", dict(fp32=66.9, tf32=494.7, bf16=989.4)),
         ("H100 SXM", dict(fp32=66.9, tf32=494.7, bf16=989.4)),
         ("H200", dict(fp32=66.9, tf32=494.7, bf16=989.4)),
         ("A100", dict(fp32=19.5, tf32=156.0, bf16=312.0))]
GEMM_PEAK_SHAPE = (2048, 1024, 1024)  # N, IC, OC: the product ftx bench train times
FLOPS_CONVENTION = "PaLM: 6 x GEMM weights + 12 x L_att x T x D_att (+ mapper backward 2 x 2^H x (D + H)) per token"


def flops_per_token(L, D, nh, hf, V, H, T):
    """Training FLOPs per predicted token with the convention of `ftx bench train` (the count of
    ftx's algorithm, not of this dense one: the one-hot GEMMs over 2^H codes are not counted)."""
    block = 4 * D * D + 3 * D * hf
    blocks = L + (1 if H > 0 else 0)
    gemm = blocks * block + V * D + (H * D if H > 0 else 0)
    flops = 6 * gemm + 12 * blocks * T * D
    if H > 0:
        flops += 2 * 2 ** H * (D + H)
    return float(flops)


def peak_tflops(device, precision):
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    if "NVL" in name:
        return None
    for part, peaks in PEAKS:
        if part in name:
            return peaks[precision]
    return None


def gemm_peak_tflops(autocast, seconds):
    """On the CPU, the GEMM peak this PyTorch reaches at the step's precision, measured as `ftx bench
    train` measures its own (core/model/flops.h): one Linear product out (2048, 1024) = inp (2048,
    1024) @ w (1024, 1024)^T under the step's autocast, the fastest call of about `seconds` (at
    least 3, after one untimed). None with seconds 0."""
    if seconds <= 0:
        return None
    n, ic, oc = GEMM_PEAK_SHAPE
    inp, w = torch.randn(n, ic), torch.randn(oc, ic)
    best, spent, calls = float("inf"), 0.0, 0
    with torch.no_grad(), autocast:
        F.linear(inp, w)
        while calls < 3 or spent < seconds:
            t0 = time.perf_counter()
            F.linear(inp, w)
            dt = time.perf_counter() - t0
            best, spent, calls = min(best, dt), spent + dt, calls + 1
    return 2.0 * n * ic * oc / best / 1e12


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--latent-bits", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=344, help="SwiGLU hidden width")
    ap.add_argument("--vocab", type=int, default=ft.V, help="other than 29: random tokens")
    ap.add_argument("--seq-len", type=int, default=SYNTHETIC_T,
                    help="predicted positions T (other than 65: random tokens)")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default=None,
                    help="GEMM inputs (default: fp32 on cpu, tf32 on cuda; tf32 and bf16 need cuda)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps or runs (default 5, --generate 1)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps or runs (default 20, --generate 3)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads")
    ap.add_argument("--gemm-peak-seconds", type=float, default=0.5,
                    help="on the CPU: after the steps, the GEMM peak at the step's precision measured this long "
                         "(0: not measured)")
    ap.add_argument("--generate", action="store_true",
                    help="time greedy generation without a KV cache instead of training")
    ap.add_argument("--len", type=int, default=SYNTHETIC_T + 1,
                    help="--generate: positions per run (default 66, the synthetic task's length)")
    a = ap.parse_args()
    a.warmup = a.warmup if a.warmup is not None else (1 if a.generate else 5)
    a.steps = a.steps if a.steps is not None else (3 if a.generate else 20)
    a.precision = a.precision or ("tf32" if a.device == "cuda" else "fp32")
    if a.device == "cpu" and a.precision == "tf32":
        ap.error("--precision tf32 needs --device cuda")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: this PyTorch has no CUDA or no GPU is visible")
    if a.dim % a.heads or (a.dim // a.heads) % 2:
        ap.error(f"--dim {a.dim} must be a multiple of --heads {a.heads} with an even head size")
    if not 0 <= a.latent_bits <= 20 or (a.latent_bits > 0 and a.layers < 2):
        ap.error("--latent-bits must be in 0..20, and a Free Transformer needs --layers >= 2")
    if a.gemm_peak_seconds < 0:
        ap.error("--gemm-peak-seconds must be >= 0")
    if min(a.layers, a.ffn, a.vocab, a.seq_len, a.batch, a.steps, a.len) <= 0 or a.warmup < 0:
        ap.error("shapes, --batch, --len and --steps must be positive")
    return a


def make_batch(a, gen):
    """(B, T+1) tokens on the CPU: the synthetic task when the shape is its own, else uniform."""
    if a.vocab == ft.V and a.seq_len == SYNTHETIC_T:
        return ft.make_batch(a.batch, gen)
    return torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), generator=gen)


def train_step(m, params, opt, x, a, kappa, autocast):
    inp, tgt = x[:, :-1], x[:, 1:]
    with autocast:
        if a.latent_bits > 0:
            ce, kl, excess = m.forward_train(inp, tgt, kappa)
            loss = ce + excess
        else:
            h = m.first_half(inp)
            logits = m.second_half(h, torch.zeros_like(h))
            loss = F.cross_entropy(logits.reshape(-1, m.vocab), tgt.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


@torch.no_grad()
def generate_run(m, a, gen):
    """One greedy run of --len positions for --batch sequences without a KV cache: the forward at
    position t runs over the whole prefix 0..t. Codes (B, len) are uniform over 2^H (the prior)."""
    x = torch.zeros(a.batch, 1, dtype=torch.long, device=a.device)  # (B, 1) first token 0
    codes = torch.randint(0, 2 ** m.H, (a.batch, a.len), device=a.device, generator=gen)
    for t in range(a.len):
        h = m.first_half(x)  # (B, t+1, D)
        R = m.post[codes[:, :t + 1]] if a.latent_bits > 0 else torch.zeros_like(h)  # gather, no one-hot
        logits = m.second_half(h, R)[:, -1]  # (B, V)
        x = torch.cat([x, logits.argmax(-1, keepdim=True)], 1)
    return x


def main_generate(a, m, autocast):
    cuda = a.device == "cuda"
    m.eval()
    gen = torch.Generator(device=a.device).manual_seed(0)
    times = []
    for i in range(a.warmup + a.steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with autocast:
            generate_run(m, a, gen)
        if cuda:
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    params = sum(p.numel() for n, p in m.named_parameters()
                 if a.latent_bits > 0 or not n.startswith(("enc", "zeta", "post")))
    print(json.dumps({"impl": "pytorch-eager", "torch": torch.__version__,
                      "device": torch.cuda.get_device_name() if cuda else "cpu",
                      "threads": a.threads, "precision": a.precision,
                      "layers": a.layers, "dim": a.dim, "heads": a.heads, "ffn": a.ffn, "vocab": a.vocab,
                      "latent_bits": a.latent_bits, "params": params, "batch": a.batch, "len": a.len,
                      "kv_cache": False, "timed_runs": a.steps,
                      "run_ms_median": med * 1e3, "run_ms_min": min(times) * 1e3,
                      "tokens_per_s": a.batch * a.len / med, "ms_per_position": med * 1e3 / a.len,
                      "peak_gpu_mem_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}, indent=2))


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    m = ft.FT(H=max(a.latent_bits, 1), D=a.dim, L=a.layers, nh=a.heads, hf=a.ffn,
              Tmax=max(a.seq_len + 1, a.len), vocab=a.vocab).to(a.device)
    # bf16: PyTorch's autocast (on the CPU its Linear layers run oneDNN's bf16 GEMMs, AMX where the
    # CPU has it), fp32 master weights and AdamW state, as ftx's --precision bf16.
    autocast = (torch.autocast(a.device, dtype=torch.bfloat16) if a.precision == "bf16"
                else contextlib.nullcontext())
    if a.generate:
        return main_generate(a, m, autocast)
    params = [p for n, p in m.named_parameters() if a.latent_bits > 0 or not n.startswith(("enc", "zeta", "post"))]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=False)
    gen = torch.Generator().manual_seed(0)
    kappa = math.log(2) / 8
    times = []
    for i in range(a.warmup + a.steps):
        x = make_batch(a, gen)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_step(m, params, opt, x.to(a.device), a, kappa, autocast)
        if cuda:
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    T = a.seq_len
    tokens_per_s = a.batch * T / med
    flops = flops_per_token(a.layers, a.dim, a.heads, a.ffn, a.vocab, a.latent_bits, T)
    tflops = flops * tokens_per_s / 1e12
    peak = peak_tflops(a.device, a.precision)
    gemm_peak = None if cuda else gemm_peak_tflops(autocast, a.gemm_peak_seconds)
    print(json.dumps({"impl": "pytorch-eager", "torch": torch.__version__,
                      "device": torch.cuda.get_device_name() if cuda else "cpu",
                      "threads": a.threads, "precision": a.precision,
                      "data": "synthetic" if a.vocab == ft.V and T == SYNTHETIC_T else "random",
                      "layers": a.layers, "dim": a.dim, "heads": a.heads, "ffn": a.ffn, "vocab": a.vocab,
                      "latent_bits": a.latent_bits, "params": sum(p.numel() for p in params),
                      "batch": a.batch, "seq_len": T, "tokens_per_step": a.batch * T, "timed_steps": a.steps,
                      "step_ms_median": med * 1e3, "step_ms_min": min(times) * 1e3, "tokens_per_s": tokens_per_s,
                      "model_flops_per_token": flops, "model_tflops": tflops, "peak_tflops": peak,
                      "mfu": tflops / peak if peak else None,
                      "gemm_peak_tflops": gemm_peak, "gemm_peak_shape": list(GEMM_PEAK_SHAPE) if gemm_peak else None,
                      "fraction_of_gemm_peak": tflops / gemm_peak if gemm_peak else None,
                      "flops_convention": FLOPS_CONVENTION,
                      "peak_gpu_mem_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}, indent=2))


if __name__ == "__main__":
    main()

"""The Hugging Face transformers peer of `ftx bench generate` on a real model: transformers with PyTorch on
the CPU, batch 1, timing a prefill of --prefill tokens (default 512) and a greedy decode of --decode tokens
(default 128) with the KV cache, printed as one JSON line per dtype:
    {"peer": "transformers", "dtype": "bf16", "threads": 2, "prefill_tokens_per_s": ..., "decode_tokens_per_s": ..., ...}

The model is the SmolLM2-135M-Instruct Q4_1 GGUF that ./test.sh fetches (default; transformers dequantizes it
with gguf-py to float32, then casts to --dtype, and ties lm_head to the embedding), or a Hugging Face directory
(config.json + safetensors). The prompt is --prefill uniform random ids (seeded; speed does not depend on
them). Prefill: one forward over the prompt with use_cache=True and logits for the last position only
(logits_to_keep=1, as generate() does and as llama.cpp computes them). Decode: --decode single-token forwards,
each feeding the argmax of the previous logits, on the cache the prefill filled (so attention covers 512 to
639 positions); --decode-from-empty starts the decode on an empty cache instead, which is what llama-bench's
tg128 measures. Each figure is the median over --reps timed runs after one untimed warm-up run.
torch.set_num_threads(--threads) (default 2, as llama-bench -t 2).

On a machine other jobs are loading, set OMP_WAIT_POLICY=PASSIVE (as for resources/pytorch_peer): with
OpenMP's default spinning, a decode step's hundreds of small ops each wait at a barrier for a descheduled
thread. On 2 shared cores (load about 9) that gave 0.6 decode tokens/s with 2 threads against 12 with
PASSIVE or with 1 thread. The policy is reported in the JSON line.

Not part of the product or its tests; run by hand, alone on the machine. Loading a GGUF file needs
`accelerate` (~/.cache/ftx/venv lacks it; ~/.cache/ftx/venv-hf has it, see tests/fixtures/real/README.md):
    OMP_WAIT_POLICY=PASSIVE ~/.cache/ftx/venv-hf/bin/python resources/hf_peer/bench_transformers.py  # bf16, fp32
    ~/.cache/ftx/venv-hf/bin/python resources/hf_peer/bench_transformers.py --dtype bf16 --decode-from-empty
    ~/.cache/ftx/venv/bin/python resources/hf_peer/bench_transformers.py --model tests/fixtures/real/tiny_gqa_llama3
"""
import argparse, json, os, statistics, sys, time

import torch

DEFAULT_GGUF = os.path.join(os.environ.get("FTX_MODEL_CACHE") or os.path.expanduser("~/.cache/ftx/models"),
                            "SmolLM2-135M-Instruct.Q4_1.gguf")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def load(path, dtype):
    from transformers import AutoModelForCausalLM
    if path.endswith(".gguf"):
        if not os.path.exists(path):
            sys.exit(f"{path}: missing (./test.sh fetches it)")
        try:
            import accelerate  # noqa: F401
        except ImportError:
            sys.exit("transformers needs accelerate to load a GGUF file: run with ~/.cache/ftx/venv-hf/bin/python")
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                                     gguf_file=os.path.basename(path), dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    if model.config.tie_word_embeddings and not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight):
        model.tie_weights()  # some versions (4.45.2) leave the GGUF's lm_head untied: docs/reference_formats.md E6
    return model.eval()


def run_once(model, prompt, n_decode, from_empty):
    """Returns (prefill seconds, decode seconds)."""
    t0 = time.perf_counter()
    out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
    t1 = time.perf_counter()
    if from_empty:
        cache, tok = None, prompt[:, :1]
    else:
        cache, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    t2 = time.perf_counter()
    for _ in range(n_decode):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        cache, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    t3 = time.perf_counter()
    return t1 - t0, t3 - t2


def bench(args, dtype_name):
    import transformers
    model = load(args.model, DTYPES[dtype_name])
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prefill), generator=g)
    with torch.inference_mode():
        run_once(model, prompt, min(args.decode, 8), args.decode_from_empty)  # warm-up
        runs = [run_once(model, prompt, args.decode, args.decode_from_empty) for _ in range(args.reps)]
    prefill_s = statistics.median(r[0] for r in runs)
    decode_s = statistics.median(r[1] for r in runs)
    return {
        "peer": "transformers", "model": os.path.basename(os.path.normpath(args.model)), "dtype": dtype_name,
        "threads": torch.get_num_threads(), "batch": 1, "prefill_tokens": args.prefill, "decode_tokens": args.decode,
        "decode_start": "empty cache" if args.decode_from_empty else f"after the {args.prefill}-token prefill",
        "prefill_tokens_per_s": round(args.prefill / prefill_s, 2),
        "decode_tokens_per_s": round(args.decode / decode_s, 2) if args.decode else None,
        "repetitions": args.reps, "attn_implementation": model.config._attn_implementation,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "transformers": transformers.__version__, "torch": torch.__version__,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_GGUF, help="a .gguf file or a Hugging Face model directory")
    ap.add_argument("--dtype", choices=["bf16", "fp32", "both"], default="both")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--decode-from-empty", action="store_true",
                    help="decode on an empty cache (llama-bench's tg) instead of after the prefill")
    args = ap.parse_args()
    if args.prefill <= 0 or args.decode < 0 or args.reps <= 0 or args.threads <= 0:
        sys.exit("bench_transformers.py: --prefill, --reps and --threads must be positive, --decode >= 0")
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    for d in (["bf16", "fp32"] if args.dtype == "both" else [args.dtype]):
        print(json.dumps(bench(args, d)), flush=True)


if __name__ == "__main__":
    main()

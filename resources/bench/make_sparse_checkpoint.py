"""A sparse checkpoint directory of a large Llama shape (default: Llama-3-8B's structure with the
paper's 2^17 vocabulary, bf16), for timing `ftx inspect` and the mapping of an 8B model without
16 GB of real data: config.json, shards whose safetensors headers are real and whose data are
holes (os.truncate), and model.safetensors.index.json. Standard library only.

    python3 resources/bench/make_sparse_checkpoint.py /tmp/sparse-8b
    build/app/ftx inspect /tmp/sparse-8b
"""
import argparse, json, os, struct


def tensors(L, d, I, H, KV, hd, V, tied):
    yield "model.embed_tokens.weight", [V, d]
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", [d]
        yield p + "self_attn.q_proj.weight", [H * hd, d]
        yield p + "self_attn.k_proj.weight", [KV * hd, d]
        yield p + "self_attn.v_proj.weight", [KV * hd, d]
        yield p + "self_attn.o_proj.weight", [d, H * hd]
        yield p + "post_attention_layernorm.weight", [d]
        yield p + "mlp.gate_proj.weight", [I, d]
        yield p + "mlp.up_proj.weight", [I, d]
        yield p + "mlp.down_proj.weight", [d, I]
    yield "model.norm.weight", [d]
    if not tied:
        yield "lm_head.weight", [V, d]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shards", type=int, default=4)
    a = ap.parse_args()
    L, d, I, H, KV, hd, V = 32, 4096, 14336, 32, 8, 128, 131072
    os.makedirs(a.out, exist_ok=True)
    json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": d,
               "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": H,
               "num_key_value_heads": KV, "head_dim": hd, "vocab_size": V, "max_position_embeddings": 8192,
               "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
               "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2},
              open(os.path.join(a.out, "config.json"), "w"), indent=1)
    all_t = list(tensors(L, d, I, H, KV, hd, V, False))
    per = (len(all_t) + a.shards - 1) // a.shards
    weight_map, total = {}, 0
    for s in range(a.shards):
        name = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        header, off = {}, 0
        for t, shape in all_t[s * per:(s + 1) * per]:
            n = 2
            for x in shape:
                n *= x
            header[t] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
            off += n
            weight_map[t] = name
        total += off
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        path = os.path.join(a.out, name)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
        os.truncate(path, 8 + len(h) + off)
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(a.out, "model.safetensors.index.json"), "w"))
    print(f"{a.out}: {len(all_t)} tensors, {total} bytes of bf16 (sparse)")


if __name__ == "__main__":
    main()

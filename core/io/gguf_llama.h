// A Llama-family GGUF file (architectures llama, mistral and qwen2) read as the project's model:
// the ModelConfig, the byte-level BPE vocabulary, the chat template and end-of-generation ids from
// the metadata (keys as llama.cpp writes them), and every weight under its Hugging Face name, dequantized to
// fp32 or bf16 with the q/k rows back in Hugging Face order.
//
// llama.cpp's converter reorders the rows of q_proj and k_proj (and their biases) of llama-family
// models so that RoPE rotates adjacent pairs: GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i
// (n = n_heads for q, n_kv_heads for k). gguf_tensor_f32/bf16 undo it, so the weights are used with
// Hugging Face's rotate-half RoPE like every other checkpoint. qwen2 files are not permuted (its
// RoPE is already rotate-half in llama.cpp).
//
// Llama 3.1-style RoPE scaling arrives as the rope_freqs.weight tensor and becomes
// RopeScalingKind::Divisors. read_gguf_llama() refuses, in one line naming the file: another
// architecture, a SentencePiece vocabulary (tokenizer.ggml.model other than "gpt2"), sliding-window
// attention, mixtures of experts, rope scaling types linear, yarn and longrope, partial rotary
// dimensions, a missing, extra or misshapen tensor, and a ggml type that cannot be dequantized.
//
// Deliberately not here: the BPE algorithm (core/text/bpe_tokenizer.h builds a tokenizer from the
// BpeVocab), chat template rendering, keeping weights quantized (the model computes in fp32/bf16),
// the GGUF container itself (core/io/gguf.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/io/gguf.h"
#include "core/model/config.h"
#include "core/text/bpe_tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

struct GgufLlama {
  ModelConfig config;  // latent_bits 0; tie_embeddings when the file has no output.weight
  BpeVocab vocab;
  std::string chat_template;     // tokenizer.chat_template ("" when absent)
  std::vector<int32_t> eos_ids;  // eos, then the end-of-generation tokens found by their text
  std::string name;              // general.name ("" when absent)
  bool permuted_qk = false;      // llama-family: the file's q/k rows are in adjacent-pair order
};

// Reads the metadata and checks every tensor (presence, shape, type) against it. Touches no tensor
// data except rope_freqs.weight (head_dim / 2 floats).
Result<GgufLlama> read_gguf_llama(const GgufFile& f);

// The Hugging Face names of the model's tensors in parameter order (model.embed_tokens.weight,
// model.layers.0.input_layernorm.weight, ..., model.norm.weight, lm_head.weight when untied).
std::vector<std::string> gguf_hf_tensor_names(const GgufLlama& m);
// The GGUF tensor behind a Hugging Face name (lm_head.weight is token_embd.weight when tied).
// Errors: "PATH: no tensor for Hugging Face name 'x'".
Result<const GgufTensor*> gguf_tensor_for_hf(const GgufFile& f, const GgufLlama& m, const std::string& hf_name);

// The tensor `hf_name` dequantized into dst (numel elements, row-major in its Hugging Face shape,
// which is the GGUF shape reversed), q/k rows un-permuted for llama-family files. OpenMP over rows.
Status gguf_tensor_f32(const GgufFile& f, const GgufLlama& m, const std::string& hf_name, float* dst, int64_t numel);
Status gguf_tensor_bf16(const GgufFile& f, const GgufLlama& m, const std::string& hf_name, uint16_t* dst,
                        int64_t numel);

// rope_freqs.weight (the llama3 per-frequency divisors), empty when the file has none.
Result<std::vector<float>> gguf_rope_divisors(const GgufFile& f);

}  // namespace ftx

// ftx inspect: what a model file is (format, shapes, dtypes, tokenizer), from its headers only.
#include <chrono>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "core/explore/text_explorer.h"
#include "core/io/model_file.h"
#include "core/io/safetensors.h"

namespace ftx::app {
namespace {

using nlohmann::json;

std::string bytes_short(uint64_t b) {
  char buf[32];
  if (b >= (uint64_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(uint64_t(1) << 30));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
  return buf;
}

// "BF16 x 218, F32 x 61"
std::string dtype_summary(const ModelInfo& i) {
  std::map<std::string, int> n;
  for (const FileTensor& t : i.tensors) ++n[t.dtype];
  std::string s;
  for (const auto& [d, c] : n) s += (s.empty() ? "" : ", ") + d + " x " + std::to_string(c);
  return s;
}

// "none", "ChatML", "Llama 3" (what --chat applies), or "other (not applied by --chat)".
std::string template_kind(const std::string& tmpl) {
  if (!tmpl.empty() && chat_format(tmpl) == ChatFormat::None) return "other (not applied by --chat)";
  return chat_format_name(chat_format(tmpl));
}

json info_json(const ModelInfo& i, double open_ms, bool with_tensors) {
  const ModelConfig& c = i.config;
  json j{{"path", i.path},
         {"format", i.format},
         {"name", i.name},
         {"architecture", c.architecture},
         {"free_transformer", c.is_free()},
         {"latent_bits", c.latent_bits},
         {"layers", c.n_layers},
         {"dim", c.dim},
         {"heads", c.n_heads},
         {"kv_heads", c.n_kv_heads},
         {"head_dim", c.head_dim},
         {"ffn", c.ffn_hidden},
         {"vocab_size", c.vocab_size},
         {"context", c.max_seq_len},
         {"rope_theta", c.rope_theta},
         {"rope_scaling", c.rope_scaling.kind == RopeScalingKind::Llama3     ? "llama3"
                          : c.rope_scaling.kind == RopeScalingKind::Divisors ? "divisors"
                                                                             : "none"},
         {"tied_embeddings", c.tie_embeddings},
         {"parameters", i.n_params},
         {"file_bytes", i.file_bytes},
         {"dtypes", dtype_summary(i)},
         {"tokenizer", i.tokenizer ? i.tokenizer->type() : "none"},
         {"tokenizer_vocab", i.tokenizer ? i.tokenizer->vocab_size() : 0},
         {"add_bos", i.add_bos},
         {"eos_ids", i.eos_ids},
         {"chat_template", template_kind(i.chat_template)},
         {"open_ms", open_ms}};
  if (with_tensors) {
    json t = json::array();
    for (const FileTensor& x : i.tensors)
      t.push_back({{"name", x.name}, {"dtype", x.dtype}, {"shape", x.shape}, {"bytes", x.bytes}});
    j["tensors"] = t;
  }
  return j;
}

}  // namespace

void add_inspect_options(CLI::App& app, InspectArgs& a) {
  auto* c = app.add_subcommand("inspect", "What a model file is: format, shapes, dtypes, tokenizer (headers only)");
  c->add_option("path", a.path, "A checkpoint directory or a .gguf file")->required();
  c->add_flag("--json", a.json, "One JSON object");
  c->add_flag("--tensors", a.tensors, "List every tensor");
}

int run_inspect(const InspectArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  auto f = ModelFile::open(a.path);
  if (!f) return fail(f.error());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const ModelInfo& i = (*f)->info();
  const json j = info_json(i, ms, a.tensors);
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  const ModelConfig& c = i.config;
  std::printf("%s  (%s, %s on disk, opened in %.1f ms)\n", i.path.c_str(), i.format.c_str(),
              bytes_short(i.file_bytes).c_str(), ms);
  std::printf("  name          %s\n", i.name.c_str());
  std::printf("  architecture  %s, %s\n", c.architecture.c_str(),
              c.is_free() ? ("Free Transformer, H = " + std::to_string(c.latent_bits) + " latent bits, Z after block " +
                             std::to_string(c.inject_after))
                                .c_str()
                          : "plain decoder (no latent Z)");
  std::printf("  shape         %d layers, dim %d, %d heads / %d kv heads x %d, ffn %d, vocab %d, context %d\n",
              c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_hidden, c.vocab_size, c.max_seq_len);
  std::printf("  rope          theta %g, scaling %s%s\n", double(c.rope_theta),
              j["rope_scaling"].get<std::string>().c_str(),
              c.qkv_bias ? (c.o_bias ? ", q/k/v/o biases" : ", q/k/v biases") : "");
  std::printf("  parameters    %lld (%s in bf16)%s\n", static_cast<long long>(i.n_params),
              bytes_short(uint64_t(i.n_params) * 2).c_str(), c.tie_embeddings ? ", tied embeddings" : "");
  std::printf("  tensors       %zu: %s\n", i.tensors.size(), dtype_summary(i).c_str());
  if (i.tokenizer) {
    std::string eos;
    for (int32_t e : i.eos_ids) eos += (eos.empty() ? "" : " ") + std::to_string(e);
    std::printf("  tokenizer     %s, %d tokens, BOS %s, end of generation: %s\n", i.tokenizer->type().c_str(),
                i.tokenizer->vocab_size(), i.add_bos ? "added" : "not added", eos.empty() ? "-" : eos.c_str());
  } else {
    std::printf("  tokenizer     none (token ids only)\n");
  }
  std::printf("  chat template %s\n", template_kind(i.chat_template).c_str());
  if (a.tensors)
    for (const FileTensor& t : i.tensors)
      std::printf("    %-48s %-6s %s\n", t.name.c_str(), t.dtype.c_str(), shape_str(t.shape).c_str());
  return 0;
}

}  // namespace ftx::app

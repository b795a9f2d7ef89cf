// BpeTokenizer::to_tokenizer_json: the loaded vocabulary written back as tokenizer.json, so that a
// checkpoint or a token data file can carry its tokenizer (core/text/tokenizer_json.h). The
// standard keys are written as tokenizers 0.2x writes them; the "ftx" object carries the special
// ids and, for the llama.cpp flavour, the GGUF fields that bpe_from_vocab needs.
#include <nlohmann/json.hpp>

#include "core/text/bpe_impl.h"

namespace ftx {
namespace {

using json = nlohmann::json;
using Impl = BpeTokenizer::Impl;

const char* split_behavior_name(text::SplitBehavior b) {
  switch (b) {
    case text::SplitBehavior::kRemoved:
      return "Removed";
    case text::SplitBehavior::kIsolated:
      return "Isolated";
    case text::SplitBehavior::kMergedWithPrevious:
      return "MergedWithPrevious";
    case text::SplitBehavior::kMergedWithNext:
      return "MergedWithNext";
    case text::SplitBehavior::kContiguous:
      return "Contiguous";
  }
  return "Isolated";
}

json pre_step_json(const text::PreStep& p) {
  switch (p.kind) {
    case text::PreStep::Kind::kSplit:
      return {{"type", "Split"},
              {"pattern", {{p.regex->literal() ? "String" : "Regex", p.regex->pattern()}}},
              {"behavior", split_behavior_name(p.behavior)},
              {"invert", p.invert}};
    case text::PreStep::Kind::kDigits:
      return {{"type", "Digits"}, {"individual_digits", p.individual_digits}};
    case text::PreStep::Kind::kByteLevel:
      return {{"type", "ByteLevel"},
              {"add_prefix_space", p.add_prefix_space},
              {"trim_offsets", true},
              {"use_regex", p.regex != nullptr}};
  }
  return nullptr;
}

json optional_id(const std::optional<int32_t>& id) { return id ? json(*id) : json(nullptr); }

}  // namespace

std::string BpeTokenizer::to_tokenizer_json() const {
  const Impl& im = *impl_;
  const bool llama = im.flavor == Impl::Flavor::kLlamaCpp;
  json added = json::array();
  for (const AddedToken& a : im.added) {
    added.push_back({{"id", a.id},
                     {"content", a.content},
                     {"single_word", a.single_word},
                     {"lstrip", a.lstrip},
                     {"rstrip", a.rstrip},
                     {"normalized", a.normalized},
                     {"special", a.special}});
  }
  json vocab = json::object();
  for (int32_t id = 0; id < im.vocab_size(); ++id)
    if (im.in_model[id]) vocab[im.spelling[id]] = id;
  json merges = json::array();
  for (const auto& [l, r] : im.merge_list) merges.push_back({im.spelling[l], im.spelling[r]});
  json pre = json::array();
  for (const text::PreStep& p : im.pre) pre.push_back(pre_step_json(p));

  json post = nullptr;
  if (im.add_bos && im.specials.bos) {
    const std::string& bos = im.spelling[*im.specials.bos];
    post = {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                  {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", {*im.specials.bos}}, {"tokens", {bos}}}}}}};
  }

  json ext = {{"flavor", llama ? "llama.cpp" : "tokenizers"},
              {"bos", optional_id(im.specials.bos)},
              {"eos", optional_id(im.specials.eos)},
              {"pad", optional_id(im.specials.pad)},
              {"add_bos", im.add_bos}};
  if (llama) {
    ext["pre"] = im.gguf_pre;
    // Only the types other than normal (1), as [id, type] pairs: a full list is 50k numbers.
    json types = json::array();
    for (size_t i = 0; i < im.gguf_types.size(); ++i)
      if (im.gguf_types[i] != 1) types.push_back({i, im.gguf_types[i]});
    ext["token_types"] = std::move(types);
  }

  json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added)},
      {"normalizer", im.nfc ? json{{"type", "NFC"}} : json(nullptr)},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", std::move(pre)}}},
      {"post_processor", std::move(post)},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", im.unk ? json(im.spelling[*im.unk]) : json(nullptr)},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", im.fuse_unk},
        {"byte_fallback", false},
        {"ignore_merges", im.ignore_merges},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merges)}}},
      {"ftx", std::move(ext)}};
  return root.dump() + "\n";
}

}  // namespace ftx

// bpe_from_tokenizer_json: a Hugging Face tokenizer.json read as tokenizers 0.2x deserializes it
// (tokenizer/serialization.rs, models/bpe/serialization.rs, the pre-tokenizer and processor
// types), strictly: ids must be unique and contiguous, added tokens must agree with the vocab,
// merges must name tokens, and every feature that would change the ids and is not implemented is
// refused in one line naming the file and the feature.
#include <algorithm>
#include <climits>
#include <filesystem>
#include <unordered_set>

#include "core/text/bpe_impl.h"
#include "core/text/unicode_text.h"
#include "core/util/fs.h"
#include "core/util/json_strict.h"

namespace ftx {
namespace {

using json = nlohmann::json;
using Impl = BpeTokenizer::Impl;

constexpr uint64_t kMaxTokenizerJsonBytes = 512ull << 20;
// Sequences inside sequences deeper than this are refused (the readers recurse).
constexpr int kMaxNesting = 32;

// obj[key], or null when absent (no copy).
const json& member(const json& obj, const char* key) {
  static const json null;
  const auto it = obj.find(key);
  return it == obj.end() ? null : *it;
}

// A JSON value for an error message: ASCII, cut after 60 characters.
std::string brief(const json& v) {
  const std::string s = v.dump(-1, ' ', true, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

// Errors are "<file>: <where>: <problem>".
struct Reader {
  std::string path;
  Error fail(const std::string& where, const std::string& problem) const {
    return make_error(path + ": " + where + ": " + problem);
  }
  // A bool member: absent or null gives `fallback`.
  Result<bool> flag(const json& obj, const char* key, const std::string& where, bool fallback) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return fail(where + "." + key, "must be true or false, got " + brief(*it));
    return it->get<bool>();
  }
  Result<std::string> type_of(const json& obj, const std::string& where) const {
    if (!obj.is_object()) return fail(where, "must be an object, got " + std::string(obj.type_name()));
    const auto it = obj.find("type");
    if (it == obj.end() || !it->is_string()) return fail(where + ".type", "missing or not a string");
    return it->get<std::string>();
  }
};

Result<int32_t> read_id(const Reader& rd, const json& v, const std::string& where) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    return rd.fail(where, "id must be an integer in [0, 2^31), got " + brief(v));
  return static_cast<int32_t>(v.get<int64_t>());
}

// One token per id: from model.vocab, then added_tokens (which must agree with the vocab where
// they share content and otherwise take ids of their own).
struct IdTable {
  std::unordered_map<int32_t, std::string> spelling;
  std::vector<int32_t> model_ids;  // the ids of model.vocab
  std::unordered_set<int32_t> added_ids;
};

Status read_vocab(const Reader& rd, const json& vocab, Impl& im, IdTable& ids) {
  if (!vocab.is_object()) return rd.fail("model.vocab", "missing or not an object");
  im.id_of.reserve(vocab.size());
  for (const auto& [token, v] : vocab.items()) {
    const std::string where = "model.vocab[" + quote_token(token) + "]";
    auto id = read_id(rd, v, where);
    if (!id) return id.error();
    if (const auto [it, fresh] = ids.spelling.emplace(*id, token); !fresh)
      return rd.fail(where, "id " + std::to_string(*id) + " is also the id of " + quote_token(it->second));
    im.id_of.emplace(token, *id);
    ids.model_ids.push_back(*id);
  }
  return {};
}

Status read_added_token(const Reader& rd, const json& t, const std::string& where, Impl& im, IdTable& ids) {
  if (!t.is_object()) return rd.fail(where, "must be an object");
  const auto content = t.find("content");
  if (content == t.end() || !content->is_string() || content->get<std::string>().empty())
    return rd.fail(where + ".content", "missing, empty or not a string");
  if (!t.contains("id")) return rd.fail(where + ".id", "missing");
  auto id = read_id(rd, t["id"], where + ".id");
  if (!id) return id.error();
  AddedToken a;
  a.content = content->get<std::string>();
  a.id = *id;
  const std::pair<const char*, bool*> flags[] = {
      {"single_word", &a.single_word}, {"lstrip", &a.lstrip}, {"rstrip", &a.rstrip}, {"special", &a.special}};
  for (const auto& [key, dst] : flags) {
    auto f = rd.flag(t, key, where, false);
    if (!f) return f.error();
    *dst = *f;
  }
  auto normalized = rd.flag(t, "normalized", where, !a.special);
  if (!normalized) return normalized.error();
  a.normalized = *normalized;
  if (const auto it = im.id_of.find(a.content); it != im.id_of.end()) {
    if (ids.added_ids.count(it->second)) return rd.fail(where, quote_token(a.content) + " is added twice");
    if (it->second != a.id)
      return rd.fail(where, quote_token(a.content) + " has id " + std::to_string(a.id) + " but model.vocab gives it " +
                                std::to_string(it->second));
  } else if (const auto [sp, fresh] = ids.spelling.emplace(a.id, a.content); !fresh) {
    return rd.fail(where, "id " + std::to_string(a.id) + " is also the id of " + quote_token(sp->second));
  } else {
    im.id_of.emplace(a.content, a.id);
  }
  ids.added_ids.insert(a.id);
  im.added.push_back(std::move(a));
  return {};
}

// Lays out spelling/bytes/special/in_model once every id is known to be used exactly once.
Status lay_out_ids(const Reader& rd, Impl& im, const IdTable& ids) {
  int64_t max_id = -1;
  for (const auto& kv : ids.spelling) max_id = std::max<int64_t>(max_id, kv.first);
  if (max_id < 0) return rd.fail("model.vocab", "no tokens");
  if (static_cast<size_t>(max_id) + 1 != ids.spelling.size()) {
    std::vector<int32_t> all;
    for (const auto& kv : ids.spelling) all.push_back(kv.first);
    std::sort(all.begin(), all.end());
    int32_t hole = 0;
    while (hole < static_cast<int32_t>(all.size()) && all[hole] == hole) ++hole;
    return rd.fail("model.vocab", "ids are not contiguous: no token has id " + std::to_string(hole) +
                                      " (the largest id is " + std::to_string(max_id) + ")");
  }
  const size_t n = ids.spelling.size();
  im.spelling.resize(n);
  im.bytes.resize(n);
  im.special.assign(n, 0);
  im.in_model.assign(n, 0);
  for (const auto& [id, s] : ids.spelling) {
    im.spelling[id] = s;
    im.bytes[id] = text::unspell(s);
  }
  for (int32_t id : ids.model_ids) im.in_model[id] = 1;
  for (const AddedToken& a : im.added) im.special[a.id] = a.special;
  return {};
}

// One merge, as two token spellings: "left right" (split at the single space, as tokenizers'
// convert_merges_to_hashmap) or ["left", "right"].
Status merge_parts(const Reader& rd, const json& m, const std::string& where, std::string* l, std::string* r) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      return rd.fail(where, quote_token(s) + " is not two tokens separated by one space");
    *l = s.substr(0, sp), *r = s.substr(sp + 1);
    return {};
  }
  if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string())
    return rd.fail(where, "must be \"left right\" or [\"left\", \"right\"], got " + brief(m));
  *l = m[0].get<std::string>(), *r = m[1].get<std::string>();
  return {};
}

Status read_merges(const Reader& rd, const json& merges, Impl& im) {
  if (!merges.is_array()) return rd.fail("model.merges", "missing or not an array");
  im.merges.reserve(merges.size());
  im.merge_list.reserve(merges.size());
  const auto model_id = [&](const std::string& t) {
    const auto it = im.id_of.find(t);
    return it != im.id_of.end() && im.in_model[it->second] ? it->second : -1;
  };
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string where = "model.merges[" + std::to_string(r) + "]";
    if (merges[r].is_string() != merges[0].is_string())
      return rd.fail(where, "mixes \"left right\" strings and [left, right] pairs");
    std::string l, rt;
    FTX_TRY(merge_parts(rd, merges[r], where, &l, &rt));
    const int32_t a = model_id(l), b = model_id(rt), c = model_id(l + rt);
    if (a < 0) return rd.fail(where, quote_token(l) + " is not in model.vocab");
    if (b < 0) return rd.fail(where, quote_token(rt) + " is not in model.vocab");
    if (c < 0) return rd.fail(where, "the merged " + quote_token(l + rt) + " is not in model.vocab");
    im.merges[Impl::pair_key(a, b)] = BpeMerge{static_cast<int32_t>(r), c};  // a repeated pair: the last rank wins
    im.merge_list.emplace_back(a, b);
  }
  return {};
}

// model's settings other than vocab and merges.
Status read_model_options(const Reader& rd, const json& model, Impl& im) {
  if (const auto d = model.find("dropout"); d != model.end() && !d->is_null()) {
    if (!d->is_number()) return rd.fail("model.dropout", "must be a number or null");
    if (d->get<double>() != 0.0) return rd.fail("model.dropout", "BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      return rd.fail(std::string("model.") + key, "is not supported by a byte-level BPE");
  }
  auto byte_fallback = rd.flag(model, "byte_fallback", "model", false);
  if (!byte_fallback) return byte_fallback.error();
  if (*byte_fallback) return rd.fail("model.byte_fallback", "true is SentencePiece-style BPE, which is not supported");
  auto ignore = rd.flag(model, "ignore_merges", "model", false);
  if (!ignore) return ignore.error();
  auto fuse = rd.flag(model, "fuse_unk", "model", false);
  if (!fuse) return fuse.error();
  im.ignore_merges = *ignore, im.fuse_unk = *fuse;
  if (const auto u = model.find("unk_token"); u != model.end() && !u->is_null()) {
    if (!u->is_string()) return rd.fail("model.unk_token", "must be a string or null");
    // An unk_token missing from the vocab is never emitted: tokenizers would fail on the text.
    if (const auto it = im.id_of.find(u->get<std::string>()); it != im.id_of.end() && im.in_model[it->second])
      im.unk = it->second;
  }
  return {};
}

Status read_normalizer(const Reader& rd, const json& n, const std::string& where, Impl& im, int depth = 0) {
  if (n.is_null()) return {};
  if (depth > kMaxNesting) return rd.fail(where, "nested more than " + std::to_string(kMaxNesting) + " deep");
  auto type = rd.type_of(n, where);
  if (!type) return type.error();
  if (*type == "NFC") {
    im.nfc = true;
    return {};
  }
  if (*type != "Sequence") return rd.fail(where, "normalizer type " + quote_token(*type) + " is not supported");
  const auto list = n.find("normalizers");
  if (list == n.end() || !list->is_array()) return rd.fail(where + ".normalizers", "missing or not an array");
  for (size_t k = 0; k < list->size(); ++k)
    FTX_TRY(read_normalizer(rd, (*list)[k], where + ".normalizers[" + std::to_string(k) + "]", im, depth + 1));
  return {};
}

Result<text::SplitBehavior> read_behavior(const Reader& rd, const json& step, const std::string& where) {
  static const std::pair<const char*, text::SplitBehavior> kNames[] = {
      {"Removed", text::SplitBehavior::kRemoved},
      {"Isolated", text::SplitBehavior::kIsolated},
      {"MergedWithPrevious", text::SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", text::SplitBehavior::kMergedWithNext},
      {"Contiguous", text::SplitBehavior::kContiguous}};
  const auto b = step.find("behavior");
  if (b != step.end() && b->is_string())
    for (const auto& [name, value] : kNames)
      if (*b == name) return value;
  return rd.fail(where + ".behavior",
                 "must be one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

Status read_split(const Reader& rd, const json& step, const std::string& where, std::vector<text::PreStep>& out) {
  text::PreStep s;
  auto behavior = read_behavior(rd, step, where);
  if (!behavior) return behavior.error();
  auto invert = rd.flag(step, "invert", where, false);
  if (!invert) return invert.error();
  s.behavior = *behavior, s.invert = *invert;
  const auto p = step.find("pattern");
  const bool regex = p != step.end() && p->is_object() && p->contains("Regex") && (*p)["Regex"].is_string();
  const bool literal = p != step.end() && p->is_object() && p->contains("String") && (*p)["String"].is_string();
  if (p == step.end() || p->size() != 1 || (!regex && !literal))
    return rd.fail(where + ".pattern", "must be {\"Regex\": \"...\"} or {\"String\": \"...\"}");
  const std::string pattern = (*p)[regex ? "Regex" : "String"].get<std::string>();
  auto re = text::Regex::compile(pattern, literal);
  if (!re) return rd.fail(where + ".pattern", "invalid regex " + quote_token(pattern) + ": " + re.error().message);
  s.regex = std::move(*re);
  out.push_back(std::move(s));
  return {};
}

Status read_pre_step(const Reader& rd, const json& step, const std::string& where, std::vector<text::PreStep>& out,
                     int depth = 0) {
  if (depth > kMaxNesting) return rd.fail(where, "nested more than " + std::to_string(kMaxNesting) + " deep");
  auto type = rd.type_of(step, where);
  if (!type) return type.error();
  text::PreStep s;
  if (*type == "Sequence") {
    const auto list = step.find("pretokenizers");
    if (list == step.end() || !list->is_array()) return rd.fail(where + ".pretokenizers", "missing or not an array");
    for (size_t k = 0; k < list->size(); ++k)
      FTX_TRY(read_pre_step(rd, (*list)[k], where + ".pretokenizers[" + std::to_string(k) + "]", out, depth + 1));
    return {};
  }
  if (*type == "Split") return read_split(rd, step, where, out);
  if (*type == "Digits") {
    auto individual = rd.flag(step, "individual_digits", where, false);
    if (!individual) return individual.error();
    s.kind = text::PreStep::Kind::kDigits, s.individual_digits = *individual;
  } else if (*type == "ByteLevel") {
    auto prefix = rd.flag(step, "add_prefix_space", where, true);
    if (!prefix) return prefix.error();
    auto use_regex = rd.flag(step, "use_regex", where, true);
    if (!use_regex) return use_regex.error();
    s.kind = text::PreStep::Kind::kByteLevel, s.add_prefix_space = *prefix;
    if (*use_regex) s.regex = std::move(*text::Regex::compile(text::kGpt2Pattern, false));
  } else {
    return rd.fail(where, "pre-tokenizer type " + quote_token(*type) + " is not supported");
  }
  out.push_back(std::move(s));
  return {};
}

Status read_pre_tokenizer(const Reader& rd, const json& root, Impl& im) {
  const auto p = root.find("pre_tokenizer");
  if (p != root.end() && !p->is_null()) FTX_TRY(read_pre_step(rd, *p, "pre_tokenizer", im.pre));
  const auto byte_level = std::find_if(
      im.pre.begin(), im.pre.end(), [](const text::PreStep& s) { return s.kind == text::PreStep::Kind::kByteLevel; });
  if (byte_level == im.pre.end())
    return rd.fail("pre_tokenizer", "has no ByteLevel step: only byte-level BPE tokenizers are supported");
  if (byte_level + 1 != im.pre.end()) return rd.fail("pre_tokenizer", "steps after ByteLevel are not supported");
  return {};
}

// The post-processor's part here: whether its "single" template puts a special token before the
// text (BOS). Tokens it puts after the text are not added by anything in this project.
Status read_post_processor(const Reader& rd, const json& p, const std::string& where, Impl& im, int depth = 0) {
  if (p.is_null()) return {};
  if (depth > kMaxNesting) return rd.fail(where, "nested more than " + std::to_string(kMaxNesting) + " deep");
  auto type = rd.type_of(p, where);
  if (!type) return type.error();
  if (*type == "ByteLevel") return {};
  if (*type == "Sequence") {
    const auto list = p.find("processors");
    if (list == p.end() || !list->is_array()) return rd.fail(where + ".processors", "missing or not an array");
    for (size_t k = 0; k < list->size(); ++k)
      FTX_TRY(read_post_processor(rd, (*list)[k], where + ".processors[" + std::to_string(k) + "]", im, depth + 1));
    return {};
  }
  if (*type != "TemplateProcessing")
    return rd.fail(where, "post-processor type " + quote_token(*type) + " is not supported");
  const auto single = p.find("single");
  if (single == p.end() || !single->is_array() || single->empty() || !single->front().is_object())
    return rd.fail(where + ".single", "missing or not a template");
  const auto first = single->front().find("SpecialToken");
  if (first == single->front().end()) return {};  // the text comes first: no BOS
  const json name = first->is_object() ? first->value("id", json()) : json();
  const auto specials = p.find("special_tokens");
  const json* entry =
      specials != p.end() && specials->is_object() && name.is_string() && specials->contains(name.get<std::string>())
          ? &(*specials)[name.get<std::string>()]
          : nullptr;
  if (!entry || !entry->is_object() || !entry->contains("ids") || !(*entry)["ids"].is_array() ||
      (*entry)["ids"].size() != 1)
    return rd.fail(where + ".special_tokens", "the template's first token " + brief(name) + " has no single id");
  auto id = read_id(rd, (*entry)["ids"][0], where + ".special_tokens");
  if (!id) return id.error();
  if (*id >= im.vocab_size())
    return rd.fail(where + ".special_tokens", "id " + std::to_string(*id) + " is not a token");
  im.add_bos = true;
  im.specials.bos = *id;
  return {};
}

Status read_decoder(const Reader& rd, const json& d, const std::string& where, int depth = 0) {
  if (depth > kMaxNesting) return rd.fail(where, "nested more than " + std::to_string(kMaxNesting) + " deep");
  auto type = rd.type_of(d, where);
  if (!type) return type.error();
  if (*type == "ByteLevel") return {};
  if (*type == "Sequence") {
    const auto list = d.find("decoders");
    if (list == d.end() || !list->is_array() || list->empty())
      return rd.fail(where + ".decoders", "missing, empty or not an array");
    for (size_t k = 0; k < list->size(); ++k)
      FTX_TRY(read_decoder(rd, (*list)[k], where + ".decoders[" + std::to_string(k) + "]", depth + 1));
    return {};
  }
  return rd.fail(where, "decoder type " + quote_token(*type) + " is not supported (only ByteLevel)");
}

// The id of a token given as "text" or {"content": "text"} (tokenizer_config.json's forms).
std::optional<int32_t> token_named(const Impl& im, const json& v) {
  const json text = v.is_object() ? v.value("content", json()) : v;
  if (!text.is_string()) return std::nullopt;
  const auto it = im.id_of.find(text.get<std::string>());
  return it == im.id_of.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

// Without tokenizer_config.json, EOS is the first of the usual end-of-text tokens present.
void guess_eos(Impl& im) {
  for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>"})
    if (!im.specials.eos) im.specials.eos = token_named(im, name);
}

// bos/eos/pad from tokenizer_config.json beside tokenizer.json when there is one, else guess_eos.
// The template's BOS (add_bos) is kept.
Status read_special_names(const std::string& json_path, Impl& im) {
  const std::string config = (std::filesystem::path(json_path).parent_path() / "tokenizer_config.json").string();
  if (std::error_code ec; !std::filesystem::is_regular_file(config, ec)) {
    guess_eos(im);
    return {};
  }
  auto text = read_small_file(config, 64 << 20);
  if (!text) return text.error();
  auto j = parse_json_strict(*text, config);
  if (!j) return j.error();
  if (!j->is_object()) return make_error(config + ": must be a JSON object");
  if (!im.add_bos && j->contains("bos_token")) im.specials.bos = token_named(im, (*j)["bos_token"]);
  if (j->contains("eos_token")) im.specials.eos = token_named(im, (*j)["eos_token"]);
  if (j->contains("pad_token")) im.specials.pad = token_named(im, (*j)["pad_token"]);
  return {};
}

Status read_tokenizer(const Reader& rd, const json& root, Impl& im) {
  if (!root.is_object()) return rd.fail("tokenizer.json", "must be a JSON object");
  if (const auto v = root.find("version"); v != root.end() && *v != "1.0")
    return rd.fail("version", "only version \"1.0\" is known, got " + brief(*v));
  const auto model = root.find("model");
  if (model == root.end()) return rd.fail("model", "missing");
  auto type = rd.type_of(*model, "model");
  if (!type) return type.error();
  if (*type != "BPE") return rd.fail("model.type", "model type " + quote_token(*type) + " is not supported (only BPE)");
  IdTable ids;
  FTX_TRY(read_vocab(rd, member(*model, "vocab"), im, ids));
  const json& added = member(root, "added_tokens");
  if (!added.is_null() && !added.is_array()) return rd.fail("added_tokens", "must be an array");
  for (size_t k = 0; k < added.size(); ++k)
    FTX_TRY(read_added_token(rd, added[k], "added_tokens[" + std::to_string(k) + "]", im, ids));
  FTX_TRY(lay_out_ids(rd, im, ids));
  FTX_TRY(read_merges(rd, member(*model, "merges"), im));
  FTX_TRY(read_model_options(rd, *model, im));
  FTX_TRY(read_normalizer(rd, member(root, "normalizer"), "normalizer", im));
  FTX_TRY(read_pre_tokenizer(rd, root, im));
  FTX_TRY(read_post_processor(rd, member(root, "post_processor"), "post_processor", im));
  if (!root.contains("decoder")) return rd.fail("decoder", "missing (a ByteLevel decoder is required)");
  FTX_TRY(read_decoder(rd, root["decoder"], "decoder"));
  im.index_bytes();
  im.index_added();
  return {};
}

// The "ftx" object (in "model") that BpeTokenizer::to_tokenizer_json writes: the special ids and add_bos, which
// then replace what the template and the guess gave.
Status read_ftx_specials(const Reader& rd, const json& ext, Impl& im) {
  SpecialTokens sp;
  for (const auto& [key, dst] :
       {std::pair<const char*, std::optional<int32_t>*>{"bos", &sp.bos}, {"eos", &sp.eos}, {"pad", &sp.pad}}) {
    const json& v = member(ext, key);
    if (v.is_null()) continue;
    auto id = read_id(rd, v, std::string("model.ftx.") + key);
    if (!id) return id.error();
    if (*id >= im.vocab_size())
      return rd.fail(std::string("model.ftx.") + key, "id " + std::to_string(*id) + " is not a token");
    *dst = *id;
  }
  auto add_bos = rd.flag(ext, "add_bos", "model.ftx", false);
  if (!add_bos) return add_bos.error();
  if (*add_bos && !sp.bos) return rd.fail("model.ftx.add_bos", "is true but there is no bos id");
  im.specials = sp;
  im.add_bos = *add_bos;
  return {};
}

// A tokenizer made from GGUF metadata, written back: its vocabulary handed to bpe_from_vocab, so
// the llama.cpp rules apply exactly as they did to the GGUF file.
Result<std::unique_ptr<BpeTokenizer>> read_llama_flavor(const Reader& rd, const json& root, const json& ext) {
  const json& model = member(root, "model");
  const json& vocab = member(model, "vocab");
  if (!vocab.is_object()) return rd.fail("model.vocab", "missing or not an object");
  BpeVocab v;
  v.tokens.resize(vocab.size());
  std::vector<uint8_t> seen(vocab.size(), 0);
  for (const auto& [token, idv] : vocab.items()) {
    auto id = read_id(rd, idv, "model.vocab[" + quote_token(token) + "]");
    if (!id) return id.error();
    if (static_cast<size_t>(*id) >= v.tokens.size() || seen[*id])
      return rd.fail("model.vocab[" + quote_token(token) + "]", "ids must be 0..N-1, each once");
    seen[*id] = 1;
    v.tokens[*id] = token;
  }
  const json& merges = member(model, "merges");
  if (!merges.is_array()) return rd.fail("model.merges", "missing or not an array");
  v.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string l, rt;
    FTX_TRY(merge_parts(rd, merges[r], "model.merges[" + std::to_string(r) + "]", &l, &rt));
    v.merges.push_back(l + " " + rt);
  }
  const json& pre = member(ext, "pre");
  if (!pre.is_string()) return rd.fail("model.ftx.pre", "missing or not a string");
  v.pre = pre.get<std::string>();
  const json& types = member(ext, "token_types");
  if (!types.is_array()) return rd.fail("model.ftx.token_types", "missing or not an array");
  if (!types.empty()) v.token_types.assign(v.tokens.size(), 1);
  for (size_t k = 0; k < types.size(); ++k) {
    const json& t = types[k];
    const std::string where = "model.ftx.token_types[" + std::to_string(k) + "]";
    if (!t.is_array() || t.size() != 2 || !t[1].is_number_integer())
      return rd.fail(where, "must be [id, type], got " + brief(t));
    auto id = read_id(rd, t[0], where);
    if (!id) return id.error();
    if (static_cast<size_t>(*id) >= v.tokens.size())
      return rd.fail(where, "id " + std::to_string(*id) + " is not a token");
    v.token_types[*id] = t[1].get<int32_t>();
  }
  Impl ids_only;  // read_ftx_specials checks ids against the vocabulary size
  ids_only.spelling.resize(v.tokens.size());
  FTX_TRY(read_ftx_specials(rd, ext, ids_only));
  v.special = ids_only.specials;
  v.add_bos = ids_only.add_bos;
  return bpe_from_vocab(v, rd.path);
}

// model.ftx, null when absent; an error when it is malformed at the top.
Result<const json*> ftx_object(const Reader& rd, const json& root) {
  static const json null;
  const json& model = root.is_object() ? member(root, "model") : null;
  const json& ext = model.is_object() ? member(model, "ftx") : null;
  if (!ext.is_null() && !ext.is_object()) return rd.fail("model.ftx", "must be an object");
  const json& flavor = member(ext, "flavor");
  if (!flavor.is_null() && flavor != "llama.cpp" && flavor != "tokenizers")
    return rd.fail("model.ftx.flavor", "must be \"llama.cpp\" or \"tokenizers\", got " + brief(flavor));
  return &ext;
}

// tokenizers' reading of the parsed file (not the llama.cpp flavour). `json_path` (a file on
// disk) lets tokenizer_config.json beside it name the special tokens when there is no "ftx".
Result<std::shared_ptr<Impl>> read_hf(const Reader& rd, const json& root, const json& ext,
                                      const std::string* json_path) {
  auto im = std::make_shared<Impl>();
  FTX_TRY(read_tokenizer(rd, root, *im));
  if (!ext.is_null()) {
    FTX_TRY(read_ftx_specials(rd, ext, *im));
  } else if (json_path) {
    FTX_TRY(read_special_names(*json_path, *im));
  } else {
    guess_eos(*im);
  }
  return im;
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> bpe_from_tokenizer_json_text(std::string_view json_text,
                                                                   const std::string& source) {
  auto root = parse_json_strict(json_text, source);
  if (!root) return root.error();
  const Reader rd{source};
  auto ext = ftx_object(rd, *root);
  if (!ext) return ext.error();
  if (member(**ext, "flavor") == "llama.cpp") return read_llama_flavor(rd, *root, **ext);
  auto im = read_hf(rd, *root, **ext, nullptr);
  if (!im) return im.error();
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(*im)));
}

Result<std::unique_ptr<BpeTokenizer>> bpe_from_tokenizer_json(const std::string& path) {
  auto text = read_small_file(path, kMaxTokenizerJsonBytes);
  if (!text) return text.error();
  auto root = parse_json_strict(*text, path);
  if (!root) return root.error();
  const Reader rd{path};
  auto ext = ftx_object(rd, *root);
  if (!ext) return ext.error();
  if (member(**ext, "flavor") == "llama.cpp") return read_llama_flavor(rd, *root, **ext);
  auto im = read_hf(rd, *root, **ext, &path);
  if (!im) return im.error();
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(*im)));
}

}  // namespace ftx

// A tokenizer's JSON forms (docs/design.md, the checkpoint contract and "Token data files"):
//  - chars: {"type": "chars", "alphabet": "_!>ABC..."}, whole, in config.json and in a run's stored
//    configuration (the form written since the first checkpoints, so old files still open);
//  - bpe: too big for config.json (a 49k vocabulary is 2 MB). A checkpoint directory holds it in
//    its own tokenizer.json (BpeTokenizer::to_tokenizer_json), and config.json refers to it:
//    {"type": "bpe", "file": "tokenizer.json", "fingerprint": "<sha256>", "vocab_size": 49152}.
//    A run's stored configuration keeps only the reference without "file" (type, fingerprint,
//    vocab_size): enough to tell which tokenizer a run used, never the vocabulary.
//  - a self-contained text (tokenizer_to_text) for files that must carry their tokenizer (token
//    data files): the chars object or the whole tokenizer.json.
// Deliberately not here: reading tokenizer.json or GGUF vocabularies (their own readers, next to
// the tokenizers they make), the rest of config.json (core/io/config_json.h).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/text/tokenizer.h"
#include "kernels/base/result.h"

namespace ftx {

// The file a checkpoint directory keeps a BPE tokenizer in.
inline constexpr const char* kTokenizerFileName = "tokenizer.json";

// The object for config.json / a run row: chars whole, bpe as the reference without "file".
// Asserts that the type is known ("chars", "bpe").
nlohmann::json tokenizer_to_json(const Tokenizer& t);

// Reads the "tokenizer" object `j` of the file `path`; errors "PATH: key 'tokenizer.type': ...".
// A bpe object is loaded from its "file" in the directory of `path` (load_tokenizer); a bpe
// reference without "file" (a run row's) is an error here. Unknown types are rejected.
Result<std::shared_ptr<const Tokenizer>> tokenizer_from_json(const nlohmann::json& j, const std::string& path);

// Writes what a checkpoint directory `dir` needs for `t` besides config.json (bpe: dir/tokenizer.json,
// durably) and sets `config_tokenizer_obj` to config.json's "tokenizer" object. A chars tokenizer
// writes nothing and gives tokenizer_to_json(t) (config.json byte-identical to before).
Status save_tokenizer(const Tokenizer& t, const std::string& dir, nlohmann::json& config_tokenizer_obj);

// Inverse of save_tokenizer: the tokenizer of config.json's "tokenizer" object `obj`, its file (if
// any) read from `dir`. `where` (config.json's path) prefixes errors; a file that does not match
// the recorded fingerprint or vocab_size is refused.
Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const nlohmann::json& obj, const std::string& dir,
                                                        const std::string& where);

// A self-contained text of the tokenizer (chars: its JSON object; bpe: its tokenizer.json), and
// back; `source` names the holder in errors. tokenizer_from_text(tokenizer_to_text(t)) has t's
// fingerprint.
std::string tokenizer_to_text(const Tokenizer& t);
Result<std::shared_ptr<const Tokenizer>> tokenizer_from_text(std::string_view text, const std::string& source);

// The end-of-text token that separates documents in training data: the first of <|endoftext|>,
// <|end_of_text|>, </s> in the vocabulary, else the tokenizer's eos; none for a tokenizer without
// one (CharTokenizer). Not the chat turn's end (<|im_end|>), which SmolLM2 also calls eos.
std::optional<int32_t> end_of_text_id(const Tokenizer& t);

}  // namespace ftx

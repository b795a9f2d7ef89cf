// Pre-tokenizers of the byte-level BPE tokenizer: the steps Hugging Face tokenizers applies between
// its normalizer and its BPE model (Split by a regex or a string with one of five behaviours,
// Digits, ByteLevel with GPT-2's regex), and llama.cpp's regex passes expressed with the same
// steps. A step turns each piece of text into smaller pieces; the pieces that leave the last step
// are what BPE merges within.
//
// Regexes are PCRE2 (8-bit, UTF + UCP, JIT when the library has it). Tokenizers' engine is
// Oniguruma (Ruby syntax); the two agree on every construct these patterns use once `\s` is
// rewritten to Oniguruma's White_Space set (PCRE2 alone also counts U+180E), `\h` to a hex digit,
// and ^ $ made line anchors.
//
// Deliberately not here: normalizers and added tokens (core/text/bpe_tokenizer.cpp), Metaspace,
// Whitespace, Punctuation and the other pre-tokenizers no byte-level model uses.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/base/result.h"

namespace ftx::text {

// A part of a string: [begin, end) and whether the pattern matched it.
struct Span {
  size_t begin, end;
  bool match;
};

// tokenizers' SplitDelimiterBehavior: what becomes of the matched parts.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A compiled pattern. Immutable; matching is thread-safe (per-thread match data and JIT stack).
class Regex {
 public:
  // `literal`: the pattern is a plain string (tokenizers' Split with a String pattern).
  // Error: "<PCRE2's message> at offset N".
  static Result<std::shared_ptr<const Regex>> compile(const std::string& pattern, bool literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Matches and the gaps between them, covering `s` (valid UTF-8) in order, as tokenizers'
  // find_matches: an empty match right where the previous match ended is skipped. Error only when
  // PCRE2 gives up (match or heap limit of a pathological pattern), naming the pattern.
  Status find_matches(std::string_view s, std::vector<Span>& out) const;
  const std::string& pattern() const { return pattern_; }
  bool literal() const { return literal_; }

 private:
  Regex() = default;
  std::string pattern_;
  bool literal_ = false;
  void* code_ = nullptr;  // pcre2_code_8
};

// GPT-2's pre-tokenizer pattern (tokenizers' ByteLevel with use_regex).
extern const char* const kGpt2Pattern;

struct PreStep {
  enum class Kind { kSplit, kDigits, kByteLevel };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // kSplit; kByteLevel when use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;             // kSplit: the gaps are the delimiters
  bool individual_digits = false;  // kDigits: each digit alone (else runs of digits)
  bool add_prefix_space = false;   // kByteLevel: a space before every piece not starting with one
  std::string describe() const;    // one line, for the tokenizer's fingerprint
};

// Applies `steps` to `text`: the resulting non-empty pieces are appended to `out`, as views into
// `text` or into strings added to `arena` (a prefix space makes a new string). Error: a regex gave up.
Status pre_tokenize(const std::vector<PreStep>& steps, std::string_view text, std::deque<std::string>& arena,
                    std::vector<std::string_view>& out);

}  // namespace ftx::text

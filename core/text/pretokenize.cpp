// Pre-tokenizer steps, ported from Hugging Face tokenizers (pattern.rs find_matches,
// normalizer.rs NormalizedString::split, digits.rs, byte_level.rs), on PCRE2.
#include "core/text/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/text/unicode_text.h"

namespace ftx::text {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// PCRE2 gives up past these (a pathological pattern), so that encode() returns instead of hanging.
constexpr uint32_t kMatchLimit = 10'000'000;
constexpr uint32_t kHeapLimitKiB = 64 * 1024;
constexpr size_t kJitStackMax = 4 << 20;

// Match data, match context and JIT stack of one thread: a JIT stack serves one thread at a time.
struct MatchResources {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, kJitStackMax, nullptr);
  MatchResources() {
    FT_ASSERT(data && context, "PCRE2: out of memory");
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
    pcre2_set_match_limit(context, kMatchLimit);
    pcre2_set_heap_limit(context, kHeapLimitKiB);
  }
  ~MatchResources() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

// Oniguruma's \s, White_Space (PCRE2's UCP \s also has U+180E): inside a character class, and as one.
constexpr const char* kSpaceSet =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// `pattern` in Oniguruma's meaning: every \s (and \S outside a class) spelled as kSpaceSet, \h and
// \H as hexadecimal digits. Escapes are copied whole, \Q...\E verbatim; classes are tracked so that
// \s inside one becomes a list of ranges.
std::string rewrite_whitespace(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 'Q') {
        const size_t end = pattern.find("\\E", i);
        const size_t stop = end == std::string::npos ? pattern.size() : end + 2;
        out.append(pattern, i - 1, stop - (i - 1));
        i = stop - 1;
      } else if (e == 's') {
        out += in_class ? std::string(kSpaceSet) : "[" + std::string(kSpaceSet) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kSpaceSet) + "]";
      } else if (e == 'h') {  // Oniguruma (Ruby syntax): a hexadecimal digit; PCRE2: horizontal space
        out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
      } else if (e == 'H' && !in_class) {
        out += "[^0-9a-fA-F]";
      } else {
        out += c;
        out += e;
      }
    } else if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a leading ] is literal
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // [:alpha:] inside a class
      const size_t stop = end == std::string::npos ? pattern.size() : end + 2;
      out.append(pattern, i, stop - i);
      i = stop - 1;
    } else {
      if (in_class && c == ']') in_class = false;
      out += c;
    }
  }
  return out;
}

size_t char_length(std::string_view s, size_t i) {
  uint32_t cp;
  const int n = utf8_decode(s, i, &cp);
  return n > 0 ? static_cast<size_t>(n) : 1;
}

// tokenizers' Pattern for a char predicate: each matching character is its own match.
template <class Pred>
void char_matches(std::string_view s, Pred pred, std::vector<Span>& out) {
  size_t last = 0, i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const int n = std::max(utf8_decode(s, i, &cp), 1);
    if (pred(cp)) {
      if (last < i) out.push_back({last, i, false});
      out.push_back({i, i + n, true});
      last = i + n;
    }
    i += static_cast<size_t>(n);
  }
  if (last < s.size() || s.empty()) out.push_back({last, s.size(), false});
}

// NormalizedString::split: spans to pieces by behaviour, empty pieces dropped.
void split_pieces(std::string_view s, std::vector<Span>& spans, SplitBehavior behavior,
                  std::vector<std::string_view>& out) {
  std::vector<Span> acc;
  acc.reserve(spans.size());
  bool prev = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      acc = spans;
      break;
    case SplitBehavior::kRemoved:
      for (const Span& sp : spans)
        if (!sp.match) acc.push_back(sp);
      break;
    case SplitBehavior::kContiguous:
      for (const Span& sp : spans) {
        if (sp.match == prev && !acc.empty()) {
          acc.back().end = sp.end;
        } else {
          acc.push_back(sp);
        }
        prev = sp.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& sp : spans) {
        if (sp.match && !prev && !acc.empty()) {
          acc.back().end = sp.end;
        } else {
          acc.push_back(sp);
        }
        prev = sp.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !prev && !acc.empty()) {
          acc.back().begin = it->begin;
        } else {
          acc.push_back(*it);
        }
        prev = it->match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
  }
  for (const Span& sp : acc)
    if (sp.end > sp.begin) out.push_back(s.substr(sp.begin, sp.end - sp.begin));
}

const char* behavior_name(SplitBehavior b) {
  switch (b) {
    case SplitBehavior::kRemoved:
      return "removed";
    case SplitBehavior::kIsolated:
      return "isolated";
    case SplitBehavior::kMergedWithPrevious:
      return "merged_with_previous";
    case SplitBehavior::kMergedWithNext:
      return "merged_with_next";
    case SplitBehavior::kContiguous:
      return "contiguous";
  }
  return "?";
}

Status apply_step(const PreStep& step, std::string_view piece, std::deque<std::string>& arena, std::vector<Span>& spans,
                  std::vector<std::string_view>& out) {
  spans.clear();
  switch (step.kind) {
    case PreStep::Kind::kSplit:
      FTX_TRY(step.regex->find_matches(piece, spans));
      if (step.invert)
        for (Span& sp : spans) sp.match = !sp.match;
      split_pieces(piece, spans, step.behavior, out);
      return {};
    case PreStep::Kind::kDigits:
      char_matches(piece, is_numeric, spans);
      split_pieces(piece, spans, step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, out);
      return {};
    case PreStep::Kind::kByteLevel:
      if (step.add_prefix_space && piece.front() != ' ') {
        std::string& spaced = arena.emplace_back(1, ' ');
        spaced.append(piece);
        piece = spaced;
      }
      if (!step.regex) {
        out.push_back(piece);
        return {};
      }
      FTX_TRY(step.regex->find_matches(piece, spans));
      split_pieces(piece, spans, SplitBehavior::kIsolated, out);
      return {};
  }
  return {};
}

}  // namespace

Result<std::shared_ptr<const Regex>> Regex::compile(const std::string& pattern, bool literal) {
  const std::string source = literal ? pattern : rewrite_whitespace(pattern);
  // Oniguruma's Ruby syntax: ^ and $ are line anchors, lines end at LF.
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE);
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  FT_ASSERT(cc, "PCRE2: out of memory");
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &code, &offset, cc);
  pcre2_compile_context_free(cc);
  if (!re) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    // The offset is in the pattern as written only when nothing was rewritten.
    const std::string where = source == pattern ? " at offset " + std::to_string(offset) : "";
    return make_error(std::string(reinterpret_cast<const char*>(buf)) + where);
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // without JIT support this fails and matching interprets
  std::shared_ptr<Regex> r(new Regex());
  r->pattern_ = pattern;
  r->literal_ = literal;
  r->code_ = re;
  return std::shared_ptr<const Regex>(std::move(r));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Status Regex::find_matches(std::string_view s, std::vector<Span>& out) const {
  if (s.empty()) {
    out.push_back({0, 0, false});
    return {};
  }
  thread_local MatchResources res;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t prev = 0, search_from = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (search_from <= s.size()) {
    const int rc = pcre2_match(static_cast<const pcre2_code*>(code_), subject, s.size(), search_from,
                               PCRE2_NO_UTF_CHECK, res.data, res.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof buf);
      return make_error("pre-tokenizer regex " + quote_token(pattern_, 40) + " gave up on a piece of " +
                        std::to_string(s.size()) + " bytes: " + reinterpret_cast<const char*>(buf));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(res.data);
    const size_t begin = ov[0], end = ov[1];
    if (begin == end && have_last && last_match_end == end) {  // Oniguruma's find_iter: no empty match here
      search_from += search_from < s.size() ? char_length(s, search_from) : 1;
      continue;
    }
    search_from = end;
    have_last = true;
    last_match_end = end;
    if (prev != begin) out.push_back({prev, begin, false});
    out.push_back({begin, end, true});
    prev = end;
  }
  if (prev != s.size()) out.push_back({prev, s.size(), false});
  return {};
}

std::string PreStep::describe() const {
  switch (kind) {
    case Kind::kSplit:
      return std::string("split ") + behavior_name(behavior) + (invert ? " inverted" : "") +
             (regex->literal() ? " string " : " regex ") + regex->pattern();
    case Kind::kDigits:
      return individual_digits ? "digits individual" : "digits";
    case Kind::kByteLevel:
      return std::string("byte_level") + (add_prefix_space ? " prefix_space" : "") + (regex ? " gpt2_regex" : "");
  }
  return "?";
}

Status pre_tokenize(const std::vector<PreStep>& steps, std::string_view text, std::deque<std::string>& arena,
                    std::vector<std::string_view>& out) {
  std::vector<std::string_view> pieces{text}, next;
  std::vector<Span> spans;
  for (const PreStep& step : steps) {
    next.clear();
    for (std::string_view p : pieces) FTX_TRY(apply_step(step, p, arena, spans, next));
    pieces.swap(next);
  }
  for (std::string_view p : pieces)
    if (!p.empty()) out.push_back(p);
  return {};
}

}  // namespace ftx::text

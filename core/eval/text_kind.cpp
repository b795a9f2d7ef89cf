// The rules of the text-kind classifier (core/eval/text_kind.h).
#include "core/eval/text_kind.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace ftx {
namespace {

// Votes a kind needs, and how many times the runner-up's it must have, to be named.
constexpr double kMinScore = 3.0;
constexpr double kMargin = 2.0;

bool starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends(std::string_view s, std::string_view p) { return s.size() >= p.size() && s.substr(s.size() - p.size()) == p; }
bool has(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// C preprocessor lines (not comments of Python or Perl).
bool is_preprocessor(std::string_view t) {
  for (std::string_view d : {"#include", "#define", "#ifndef", "#ifdef", "#endif", "#if ", "#if(", "#undef", "#pragma",
                             "#else", "#elif", "#error", "# define", "# include", "# if", "# endif", "# undef"})
    if (starts(t, d)) return true;
  return false;
}

// A line of English: at least six words, nearly all of them letters with sentence punctuation,
// and none of the symbols code is made of.
bool is_prose_line(std::string_view t) {
  if (starts(t, "*") || starts(t, "/*") || starts(t, "//") || starts(t, "#")) return false;  // a comment in code
  for (char c : std::string_view("{};=$#<>_\\|@`~^"))
    if (has(t, std::string_view(&c, 1))) return false;
  int words = 0, plain = 0;
  size_t i = 0;
  while (i < t.size()) {
    while (i < t.size() && t[i] == ' ') ++i;
    const size_t b = i;
    while (i < t.size() && t[i] != ' ') ++i;
    if (i == b) break;
    ++words;
    bool ok = true;
    for (size_t j = b; j < i; ++j) {
      const unsigned char c = static_cast<unsigned char>(t[j]);
      ok &= std::isalpha(c) || std::string_view(",.;:'\"()-!?").find(char(c)) != std::string_view::npos;
    }
    plain += ok;
  }
  return words >= 6 && plain * 10 >= words * 9;
}

void vote_line(std::string_view t, std::array<double, kTextKinds>& s) {
  if (starts(t, "| ")) t.remove_prefix(2);  // text quoted in a licence file
  double& py = s[0];
  double& c = s[1];
  double& pl = s[2];
  double& prose = s[3];
  const bool sigil = has(t, "$") || has(t, "@_") || has(t, "%$");
  // Python
  if ((starts(t, "def ") && has(t, "(")) || (starts(t, "class ") && ends(t, ":"))) py += 2;
  if (starts(t, "import ") || (starts(t, "from ") && has(t, " import "))) py += 2;
  if (starts(t, "elif ") || starts(t, "except") || t == "try:" || t == "else:" || t == "finally:") py += 2;
  if (ends(t, ":") && (starts(t, "if ") || starts(t, "for ") || starts(t, "while ") || starts(t, "with "))) py += 1.5;
  if (has(t, "self.") && !sigil) py += 1;
  if (starts(t, "@") && !has(t, " ")) py += 1;
  if (starts(t, "\"\"\"") || starts(t, "'''")) py += 1;
  if ((has(t, "None") || has(t, "True") || has(t, "False")) && !ends(t, ";")) py += 0.5;
  if (starts(t, "return ") && !ends(t, ";")) py += 0.5;
  // An assignment without the semicolon C and Perl end theirs with.
  if (!ends(t, ";") && !ends(t, "{") && !ends(t, ",") && !ends(t, "\\") && !starts(t, "#") && !starts(t, "*") &&
      !starts(t, "/") && has(t, " = ") && !sigil)
    py += 0.75;
  // C
  if (is_preprocessor(t)) c += 2;
  if (starts(t, "typedef ") || starts(t, "struct ") || starts(t, "extern ") || starts(t, "enum ") ||
      starts(t, "union ") || starts(t, "static inline"))
    c += 1.5;
  if (starts(t, "/*") || starts(t, "* ") || t == "*" || ends(t, "*/")) c += 1;
  if (has(t, "__") && !has(t, "__init__") && !sigil) c += 0.5;
  // Perl
  if (has(t, "my $") || has(t, "my @") || has(t, "my %") || has(t, "my (") || has(t, "local $")) pl += 2;
  const bool perl_statement = (starts(t, "package ") || starts(t, "use ") || starts(t, "require ") || t == "1;" ||
                               starts(t, "our ") || starts(t, "no ")) &&
                              ends(t, ";");
  if ((starts(t, "sub ") && !ends(t, ":")) || perl_statement) pl += 2;
  if (has(t, "qw(") || has(t, "qw/") || has(t, "C<") || has(t, "L<") || has(t, "B<") || has(t, "I<")) pl += 1;
  if (has(t, "=~") || has(t, "!~")) pl += 2;
  if (has(t, "$_") || has(t, "@_") || has(t, "$self")) pl += 1.5;
  if (has(t, "->{") || has(t, "}->")) pl += 1;
  for (std::string_view pod : {"=head", "=item", "=cut", "=pod", "=over", "=back", "=begin", "=end", "=for "})
    if (starts(t, pod)) pl += 2;
  // Both braces languages: a statement ends with a semicolon; sigils say which.
  if (ends(t, ";") && !perl_statement) (sigil ? pl : c) += 1;
  if (t == "{" || t == "}" || t == "};") c += 0.3, pl += 0.3;
  // Python and Perl comments (not C preprocessor lines).
  if (starts(t, "#") && !is_preprocessor(t)) py += 0.5, pl += 0.5;
  // English
  if (is_prose_line(t)) {
    prose += 1;
    if (has(t, ". ") || ends(t, ".") || ends(t, ",")) prose += 0.5;
  }
}

}  // namespace

const char* text_kind_name(TextKind k) {
  switch (k) {
    case TextKind::Python:
      return "python";
    case TextKind::C:
      return "c";
    case TextKind::Perl:
      return "perl";
    case TextKind::Prose:
      return "prose";
  }
  return "?";
}

std::optional<TextKind> parse_text_kind(std::string_view name) {
  for (TextKind k : kAllTextKinds)
    if (name == text_kind_name(k)) return k;
  return std::nullopt;
}

KindScores score_text_kind(std::string_view text) {
  KindScores r;
  size_t i = 0;
  while (i <= text.size()) {
    size_t e = text.find('\n', i);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view t = trim(text.substr(i, e - i));
    if (!t.empty()) vote_line(t, r.score);
    i = e + 1;
  }
  int best = 0, second = -1;
  for (int k = 1; k < kTextKinds; ++k) {
    if (r.score[size_t(k)] > r.score[size_t(best)])
      second = best, best = k;
    else if (second < 0 || r.score[size_t(k)] > r.score[size_t(second)])
      second = k;
  }
  const double top = r.score[size_t(best)], runner = second >= 0 ? r.score[size_t(second)] : 0.0;
  if (top >= kMinScore && top >= kMargin * runner) r.kind = kAllTextKinds[size_t(best)];
  return r;
}

double KindAgreement::validity() const { return sequences ? double(valid) / sequences : 0.0; }
double KindAgreement::agreement() const {
  return pairs ? double(same) / double(pairs) : std::numeric_limits<double>::quiet_NaN();
}

KindAgreement kind_agreement(const std::vector<std::optional<TextKind>>& kinds) {
  KindAgreement a;
  std::array<int64_t, kTextKinds> per{};
  for (const auto& k : kinds) {
    ++a.sequences;
    if (k) ++a.valid, ++per[size_t(*k)];
  }
  a.pairs = int64_t(a.valid) * (a.valid - 1);
  for (int64_t n : per) a.same += n * (n - 1);
  return a;
}

}  // namespace ftx

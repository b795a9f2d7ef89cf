// The kind of a piece of text, by rules on its syntax (no model): Python, C, Perl or English
// prose, or unknown. It judges generations of a model trained on the text-kinds corpus
// (docs/text_latent.md), so it must work on a few hundred characters cut anywhere, and says
// unknown rather than guess. Its accuracy on held-out real documents is measured by
// tests/test_text_kind.cpp and reported in docs/text_latent.md.
//
// How: every line votes by features that only one kind has (Python's `def f(...):` and `self.`,
// C's `#include` and `;`-ended declarations, Perl's `my $x` and `=~`, prose's sentences of
// lowercase words); the votes are summed per kind; the kind with the most wins when it has at
// least kMinScore and twice the runner-up.
//
// Deliberately not here: telling languages apart by keywords alone (C and Perl share braces and
// semicolons, Perl's POD is prose), any learned weights.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ftx {

enum class TextKind { Python, C, Perl, Prose };
inline constexpr int kTextKinds = 4;
inline constexpr std::array<TextKind, kTextKinds> kAllTextKinds = {TextKind::Python, TextKind::C, TextKind::Perl,
                                                                   TextKind::Prose};

// "python", "c", "perl", "prose": the names of the corpus folders and of the CLI.
const char* text_kind_name(TextKind k);
std::optional<TextKind> parse_text_kind(std::string_view name);

struct KindScores {
  std::array<double, kTextKinds> score{};  // summed votes per kind
  std::optional<TextKind> kind;            // empty: unknown
};

// The votes of every line of `text` and the verdict.
KindScores score_text_kind(std::string_view text);
inline std::optional<TextKind> classify_text_kind(std::string_view text) { return score_text_kind(text).kind; }

// A group of generations judged by kind, as Figure 4 scores the synthetic task's groups:
// validity is the share the classifier names a kind, agreement the share of pairs of valid
// sequences (i != j) of the same kind (NaN with fewer than two valid). Its chance level, when the
// model samples kinds as the data holds them, is the sum of the squared kind shares.
struct KindAgreement {
  int sequences = 0, valid = 0;
  int64_t pairs = 0, same = 0;
  double validity() const;
  double agreement() const;
};
KindAgreement kind_agreement(const std::vector<std::optional<TextKind>>& kinds);

}  // namespace ftx

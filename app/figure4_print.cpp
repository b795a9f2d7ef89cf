#include "app/figure4_print.h"

#include <cmath>
#include <cstdio>

#include "app/common.h"
#include "core/eval/synth_metrics.h"

namespace ftx::app {

// Target letters bold and coloured, noise dimmed, the rest plain.
std::string render(const std::string& text) {
  auto split = split_generation(text);
  if (!split) return text;
  std::string out = style(text.substr(0, 2), "1");
  for (char ch : split->body) {
    if (ch == split->letter)
      out += style(std::string(1, ch), "1;33");
    else if (ch == '!')
      out += style("!", "2");
    else
      out += ch;
  }
  return out;
}

std::string group_title(const GroupResult& g, int size) {
  char buf[160];
  if (!g.fixed)
    std::snprintf(buf, sizeof buf, "independent Z (a new Z for each of %d sequences)", size);
  else
    std::snprintf(buf, sizeof buf, "fixed Z, group %d (one Z for all %d sequences)", g.group, size);
  return buf;
}

void print_group(const GroupResult& g, const Tokenizer& tokenizer) {
  const int n = static_cast<int>(g.gens.size());
  std::printf("\n%s\n", style(group_title(g, n), "1;36").c_str());
  if (!std::isnan(g.valid))  // synthetic-task metrics; other tasks have none
    std::printf("  valid %.2f   agreement %.2f   noise agreement %.2f\n", g.valid, g.agreement, g.noise_agreement);
  for (const auto& gen : g.gens) {
    const std::string text = tokenizer.decode(gen.tokens);
    auto split = split_generation(text);
    std::string mark;
    if (split) {
      SynthAnalysis an = analyze_body(split->body, split->letter);
      mark = an.valid ? "" : "  " + style("invalid: " + an.reason, "31");
    }
    std::printf("  %s%s\n", render(text).c_str(), mark.c_str());
  }
}

}  // namespace ftx::app

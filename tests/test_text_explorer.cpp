// core/explore/text_explorer: what the studio computes for model files.
// - chat formats: the two known templates recognised by their markers, the exact ChatML and
//   Llama 3 wrappings, anything else used as typed; prompt tokens with BOS once, errors prefixed.
// - the Generations group plan: an independent-Z group (a Z seed per sequence) and fixed-Z groups
//   (one code sequence shared, covering every input position), token seeds all distinct; Freeze Z
//   (a new sample seed) keeps every Z, Resample Z (a new latent seed) keeps every token seed; a
//   plain decoder gets one group; bad sizes and a context overflow are one-line errors; the plan
//   generated through generate_text: rows of a fixed group at temperature 0 are identical.
// - the latent over a text: sizes, each token's bytes, KL per position equal to the closed form
//   sum_h (log 2 - Hb(p_h)) of the bit probabilities (computed here independently), same seed same
//   codes; a plain decoder refused.
#include "core/explore/text_explorer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/model/model.h"
#include "core/text/char_tokenizer.h"
#include "kernels/backend.h"

namespace ftx {
namespace {

// read_kl is computed in float on the backend; the closed form here in double.
constexpr double kKlTol = 1e-4;
const char* const kAlphabet = " abcdefghijklmnopqrstuvwxyz.";

// The char tokenizer of kAlphabet with one more id, 28, as BOS (bytes "<s>").
class BosTokenizer : public Tokenizer {
 public:
  std::string type() const override { return "chars+bos"; }
  int vocab_size() const override { return 29; }
  Result<std::vector<int32_t>> encode(std::string_view text) const override { return chars_.encode(text); }
  std::string_view token_bytes(int32_t id) const override {
    return id == 28 ? std::string_view("<s>") : chars_.token_bytes(id);
  }
  SpecialTokens special_tokens() const override { return {28, std::nullopt, std::nullopt}; }
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<BosTokenizer>(); }

 private:
  CharTokenizer chars_{kAlphabet};
};

ModelConfig tiny_config(int latent_bits) {
  ShapeOverrides o;
  o.preset = "tiny";
  o.latent_bits = latent_bits;
  auto c = shape_model_config(o, 29, 64);
  EXPECT_TRUE(c.ok()) << c.error().message;
  return *c;
}

std::unique_ptr<Model> tiny_model(Backend& be, int latent_bits) {
  auto m = Model::create(be, tiny_config(latent_bits));
  EXPECT_TRUE(m.ok()) << m.error().message;
  (*m)->init_weights(3, InitConfig{});
  return std::move(*m);
}

TextGroupsRequest request(int n, int fixed, uint64_t latent_seed, uint64_t sample_seed, int max_new = 8) {
  TextGroupsRequest r;
  r.group_size = n, r.fixed_groups = fixed, r.latent_seed = latent_seed, r.sample_seed = sample_seed;
  r.sample.max_new_tokens = max_new;
  return r;
}

TEST(ChatFormat, KnownTemplatesByTheirMarkers) {
  EXPECT_EQ(chat_format("{% for m in messages %}<|im_start|>{{ m.role }}..."), ChatFormat::ChatML);
  EXPECT_EQ(chat_format("{{ bos_token }}<|start_header_id|>system<|end_header_id|>"), ChatFormat::Llama3);
  EXPECT_EQ(chat_format(""), ChatFormat::None);
  EXPECT_EQ(chat_format("[INST] {{ m }} [/INST]"), ChatFormat::None);
  EXPECT_EQ(apply_chat(ChatFormat::ChatML, "Hi"), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      apply_chat(ChatFormat::Llama3, "Hi"),
      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat(ChatFormat::None, "Hi"), "Hi");
}

TEST(PromptTokens, BosOnceAndErrorsPrefixed) {
  BosTokenizer t;
  EXPECT_EQ(*prompt_tokens(t, false, "ab"), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*prompt_tokens(t, true, "ab"), (std::vector<int32_t>{28, 1, 2}));
  auto empty = prompt_tokens(t, true, "");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().message, "prompt: empty");
  auto bad = prompt_tokens(t, false, "aB");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("prompt: ", 0), 0u) << bad.error().message;
  EXPECT_NE(bad.error().message.find('B'), std::string::npos) << bad.error().message;
}

TEST(PlanTextGroups, IndependentAndFixedGroups) {
  const ModelConfig c = tiny_config(4);
  const std::vector<int32_t> prompt{1, 2, 3};
  auto plan = plan_text_groups(c, prompt, request(3, 2, 11, 22));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_TRUE(plan->has_latent);
  ASSERT_EQ(plan->groups.size(), 3u);
  ASSERT_EQ(plan->requests.size(), 9u);
  const int n_in = 3 + 8 - 1;
  std::set<uint64_t> sample_seeds, independent_z;
  for (const TextGroup& g : plan->groups) {
    EXPECT_EQ(g.size, 3);
    EXPECT_EQ(g.first, g.group * 3);
    EXPECT_EQ(g.fixed, g.group > 0);
    for (int i = g.first; i < g.first + g.size; ++i) {
      const GenerationRequest& r = plan->requests[size_t(i)];
      EXPECT_EQ(r.prompt, prompt);
      sample_seeds.insert(r.spec.sample_seed);
      if (!g.fixed) {
        EXPECT_EQ(r.spec.latent.kind, LatentKind::Uniform);
        EXPECT_EQ(r.spec.latent.seed, plan->latent_seeds[size_t(i)]);
        independent_z.insert(r.spec.latent.seed);
      } else {
        EXPECT_EQ(r.spec.latent.kind, LatentKind::Fixed);
        ASSERT_EQ(static_cast<int>(r.spec.latent.codes.size()), n_in) << "one code per input position";
        EXPECT_EQ(r.spec.latent.codes, plan->requests[size_t(g.first)].spec.latent.codes) << "one Z per group";
        for (uint32_t code : r.spec.latent.codes) EXPECT_LT(code, 16u);
      }
    }
  }
  EXPECT_EQ(sample_seeds.size(), 9u) << "every sequence draws its own tokens";
  EXPECT_EQ(independent_z.size(), 3u) << "each independent sequence its own Z";
  EXPECT_NE(plan->requests[3].spec.latent.codes, plan->requests[6].spec.latent.codes) << "groups differ";
}

TEST(PlanTextGroups, FreezeKeepsZAndResampleKeepsTokenSeeds) {
  const ModelConfig c = tiny_config(4);
  const std::vector<int32_t> prompt{1, 2};
  const TextGroupPlan base = *plan_text_groups(c, prompt, request(2, 1, 5, 9));
  const TextGroupPlan frozen = *plan_text_groups(c, prompt, request(2, 1, 5, 10));    // Freeze Z
  const TextGroupPlan resampled = *plan_text_groups(c, prompt, request(2, 1, 6, 9));  // Resample Z
  for (size_t i = 0; i < base.requests.size(); ++i) {
    const SequenceSpec &a = base.requests[i].spec, &f = frozen.requests[i].spec, &r = resampled.requests[i].spec;
    EXPECT_EQ(f.latent.seed, a.latent.seed);
    EXPECT_EQ(f.latent.codes, a.latent.codes);
    EXPECT_NE(f.sample_seed, a.sample_seed);
    EXPECT_EQ(r.sample_seed, a.sample_seed);
    if (a.latent.kind == LatentKind::Uniform)
      EXPECT_NE(r.latent.seed, a.latent.seed);
    else
      EXPECT_NE(r.latent.codes, a.latent.codes);
  }
}

TEST(PlanTextGroups, PlainDecoderHasOneGroup) {
  auto plan = plan_text_groups(tiny_config(0), {1, 2}, request(4, 3, 1, 1));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_FALSE(plan->has_latent);
  ASSERT_EQ(plan->groups.size(), 1u);
  EXPECT_FALSE(plan->groups[0].fixed);
  EXPECT_EQ(plan->requests.size(), 4u);
}

TEST(PlanTextGroups, BadSizesAndContextAreOneLineErrors) {
  const ModelConfig c = tiny_config(4);
  auto none = plan_text_groups(c, {1}, request(0, 1, 1, 1));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "group size 0: expected 1..16");
  auto many = plan_text_groups(c, {1}, request(2, 9, 1, 1));
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.error().message, "fixed groups 9: expected 0..8");
  auto long_ = plan_text_groups(c, {1, 2, 3}, request(2, 1, 1, 1, c.max_seq_len));
  ASSERT_FALSE(long_.ok());
  EXPECT_NE(long_.error().message.find("exceed the context"), std::string::npos) << long_.error().message;
  EXPECT_EQ(long_.error().message.find('\n'), std::string::npos);
}

TEST(PlanTextGroups, GreedyRowsOfAFixedGroupAgree) {
  auto be = make_cpu_backend();
  auto m = tiny_model(*be, 4);
  CharTokenizer t(kAlphabet);
  TextGroupsRequest req = request(3, 2, 4, 4, 10);
  req.sample.temperature = 0;  // greedy: only Z can make rows differ
  auto plan = plan_text_groups(m->config(), {1, 2, 3}, req);
  ASSERT_TRUE(plan.ok());
  auto gens = generate_text(*m, &t, plan->requests, req.sample, {});
  ASSERT_TRUE(gens.ok()) << gens.error().message;
  for (const TextGroup& g : plan->groups) {
    if (!g.fixed) continue;
    for (int i = g.first + 1; i < g.first + g.size; ++i) {
      EXPECT_EQ((*gens)[size_t(i)].tokens, (*gens)[size_t(g.first)].tokens) << "group " << g.group;
    }
  }
  EXPECT_EQ((*gens)[3].codes, plan->requests[3].spec.latent.codes);
}

TEST(InspectTextLatent, KlIsTheClosedFormOfTheBitProbabilities) {
  auto be = make_cpu_backend();
  auto m = tiny_model(*be, 6);
  BosTokenizer t;
  const std::vector<int32_t> tokens = *prompt_tokens(t, true, "the sea was calm.");
  auto li = inspect_text_latent(*m, t, tokens, 7);
  ASSERT_TRUE(li.ok()) << li.error().message;
  const int T = static_cast<int>(tokens.size()) - 1;
  EXPECT_EQ(li->T, T);
  EXPECT_EQ(li->H, 6);
  ASSERT_EQ(li->tokens.size(), tokens.size());
  EXPECT_EQ(li->tokens[0], "<s>");
  EXPECT_EQ(li->tokens[1], "t");
  EXPECT_EQ(li->text, "<s>the sea was calm.");
  ASSERT_EQ(li->bit_probs.size(), size_t(T) * 6);
  ASSERT_EQ(li->kl.size(), size_t(T));
  for (int p = 0; p < T; ++p) {
    double kl = 0;
    for (int h = 0; h < 6; ++h) {
      const double q = li->bit_probs[size_t(p) * 6 + size_t(h)];
      ASSERT_GT(q, 0.0);
      ASSERT_LT(q, 1.0);
      kl += std::log(2.0) + q * std::log(q) + (1 - q) * std::log(1 - q);
    }
    EXPECT_NEAR(li->kl[size_t(p)], kl, kKlTol) << "position " << p;
    EXPECT_LT(li->codes[size_t(p)], 64u);
  }
  auto again = inspect_text_latent(*m, t, tokens, 7);
  auto other = inspect_text_latent(*m, t, tokens, 8);
  EXPECT_EQ(again->codes, li->codes);
  EXPECT_EQ(again->bit_probs, li->bit_probs);
  EXPECT_NE(other->codes, li->codes);
  EXPECT_EQ(other->bit_probs, li->bit_probs) << "the encoder's probabilities do not depend on the seed";
}

// The Latent panel's rows for a model file: "original" is the text's prompt continued under the
// encoder's codes, "edited" the same with bits flipped, which equals the Fixed policy with those
// bits flipped by hand.
TEST(InspectTextLatent, RegenerationsFromThePromptUnderTheCodes) {
  auto be = make_cpu_backend();
  auto m = tiny_model(*be, 4);
  CharTokenizer t(kAlphabet);
  const std::vector<int32_t> tokens = *t.encode("the sea was calm");
  SampleConfig sc;
  sc.temperature = 0.8f;
  auto li = inspect_text_latent(*m, t, tokens, 3, 4, sc);
  ASSERT_TRUE(li.ok()) << li.error().message;
  ASSERT_EQ(li->regenerated_tokens.size(), tokens.size());
  EXPECT_EQ(li->regenerated.substr(0, 4), "the ");
  auto original = regenerate_text_latent(*m, tokens, 4, *li, {}, sc);
  ASSERT_TRUE(original.ok());
  EXPECT_EQ(t.decode(*original), li->regenerated);

  const std::vector<std::pair<int, int>> flips{{3, 1}, {6, 0}, {6, 3}};
  auto edited = regenerate_text_latent(*m, tokens, 4, *li, flips, sc);
  ASSERT_TRUE(edited.ok());
  std::vector<uint32_t> by_hand = li->codes;
  for (auto [p, h] : flips) by_hand[size_t(p)] ^= 1u << h;
  SampleConfig fixed_sc = sc;
  fixed_sc.max_new_tokens = int(tokens.size()) - 4;
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 4);
  auto fixed = generate_text(*m, nullptr, {{prompt, {LatentPolicy::fixed(by_hand), li->sample_seed}}}, fixed_sc, {});
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(*edited, (*fixed)[0].tokens);
  EXPECT_FALSE(regenerate_text_latent(*m, tokens, 0, *li, {}, sc).ok());
  EXPECT_FALSE(regenerate_text_latent(*m, tokens, int(tokens.size()), *li, {}, sc).ok());
}

TEST(InspectTextLatent, PlainDecoderAndShortTextsAreRefused) {
  auto be = make_cpu_backend();
  CharTokenizer t(kAlphabet);
  auto plain = tiny_model(*be, 0);
  auto r = inspect_text_latent(*plain, t, {1, 2, 3}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "this model has no latent Z (plain decoder)");
  auto free = tiny_model(*be, 4);
  auto one = inspect_text_latent(*free, t, {1}, 1);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.error().message.find("at least 2 tokens"), std::string::npos);
  auto long_ = inspect_text_latent(*free, t, std::vector<int32_t>(size_t(free->config().max_seq_len) + 2, 1), 1);
  ASSERT_FALSE(long_.ok());
  EXPECT_NE(long_.error().message.find("context"), std::string::npos);
}

}  // namespace
}  // namespace ftx

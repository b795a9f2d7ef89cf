// Config fields declared once (core/util/fields.h) and the one shaping function:
// - shape_model_config: a preset alone is the preset sized for the data; overrides change only
//   what they name (--dim keeps the preset's FFN width); errors in core's words, or in the
//   caller's through a FieldName; model_preset_names is the list model_preset accepts.
// - TrainConfig JSON: a "train" object as runs written so far hold it (coin-flip keys included)
//   loads and writes back byte for byte; the keys written are those of every run so far; types
//   are strict and errors name the file and the key; validate() names fields by key, never by a
//   command-line flag, unless a namer says otherwise.
// - SampleConfig: its bounds come from its field list.
// - Kappa (core/model/kappa.h): parsing '1/8' or '0.125 bits', its text and run-name suffix.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/config_json.h"
#include "core/model/config.h"
#include "core/sample/sampler.h"
#include "core/train/run_config.h"
#include "core/train/train_config.h"
#include "core/util/fields.h"
#include "tests/test_util.h"

namespace ftx {
namespace {

using nlohmann::json;

constexpr int kVocab = 29, kSeqLen = 66;  // the synthetic task's

void expect_error(const Status& s, const std::vector<std::string>& needles) {
  ASSERT_FALSE(s.ok());
  for (const std::string& n : needles)
    EXPECT_NE(s.error().message.find(n), std::string::npos) << "no '" << n << "' in: " << s.error().message;
  EXPECT_EQ(s.error().message.find("--"), std::string::npos) << "core names a flag: " << s.error().message;
}

template <class T>
Status status_of(const Result<T>& r) {
  return r.ok() ? Status{} : Status(r.error());
}

std::string dashed(const Field& f) { return std::string("--") + f.key; }

TEST(KappaBitsText, FractionsIntegersAndTheRest) {
  EXPECT_EQ(kappa_bits_text(1.0 / 64), "1/64 bit");
  EXPECT_EQ(kappa_bits_text(nats_to_bits(static_cast<float>(bits_to_nats(0.125)))), "1/8 bit") << "through float nats";
  EXPECT_EQ(kappa_bits_text(nats_to_bits(static_cast<float>(bits_to_nats(1)))), "1 bit");
  EXPECT_EQ(kappa_bits_text(8), "8 bits");
  EXPECT_EQ(kappa_bits_text(0.3), "0.3 bits");
  EXPECT_EQ(kappa_bits_text(1.5), "1.5 bits");
  EXPECT_EQ(kappa_bits_text(0), "0 bits");
}

TEST(KappaText, ShortTextAndRunNamesFollowTheSameRule) {
  EXPECT_EQ(kappa_short_text(0.125), "1/8");
  EXPECT_EQ(kappa_short_text(8), "8");
  EXPECT_EQ(kappa_short_text(0.3), "0.3");
  // The CLI's sweep and the studio's name runs <name>-<suffix>: the names the shipped models have.
  EXPECT_EQ(kappa_run_suffix(1.0 / 64), "1_64bit");
  EXPECT_EQ(kappa_run_suffix(nats_to_bits(static_cast<float>(bits_to_nats(0.125)))), "1_8bit");
  EXPECT_EQ(kappa_run_suffix(1), "1bit");
  EXPECT_EQ(kappa_run_suffix(8), "8bit");
  EXPECT_EQ(kappa_run_suffix(0.3), "0.3bit");
}

TEST(ParseKappaBits, AcceptsFractionsDecimalsAndAUnit) {
  constexpr double kTol = 1e-12;
  EXPECT_NEAR(parse_kappa_bits("1/8").value_or(-1), 0.125, kTol);
  EXPECT_NEAR(parse_kappa_bits(" 1 / 64 ").value_or(-1), 1.0 / 64, kTol);
  EXPECT_NEAR(parse_kappa_bits("0.125").value_or(-1), 0.125, kTol);
  EXPECT_NEAR(parse_kappa_bits(" 2 ").value_or(-1), 2.0, kTol);
  EXPECT_NEAR(parse_kappa_bits("0.125 bits").value_or(-1), 0.125, kTol);
  EXPECT_NEAR(parse_kappa_bits("1/8 bit").value_or(-1), 0.125, kTol);
  EXPECT_NEAR(parse_kappa_bits("0").value_or(-1), 0.0, kTol) << "no free bits is a valid kappa";
  // What kappa_bits_text writes reads back.
  for (double bits : {1.0 / 64, 0.125, 1.0, 8.0, 0.3})
    EXPECT_NEAR(parse_kappa_bits(kappa_bits_text(bits)).value_or(-1), bits, 1e-9) << kappa_bits_text(bits);
}

TEST(ParseKappaBits, RefusesTextNegativesInfinitiesAndZeroDenominators) {
  for (const char* bad : {"abc", "", "  ", "-1", "1/-8", "1/0", "inf", "nan", "/8", "1/", "1/8/2", "1e999", "0.1x",
                          "bits", "0x10", "1 bytes"})
    EXPECT_FALSE(parse_kappa_bits(bad).ok()) << "'" << bad << "'";
  auto refused = parse_kappa_bits("abc");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "kappa 'abc' is not a number of bits (e.g. 1/8 or 0.125)");
}

TEST(ParseKappaList, EveryValueInOrderSkippingEmptyEntries) {
  for (const char* text : {"1/64, 1/8, 1, 8", "1/64,1/8,1,8,", " 1/64 ,, 1/8, 1 , 8 "}) {
    const auto list = parse_kappa_list(text);
    ASSERT_TRUE(list.ok()) << text;
    EXPECT_EQ(*list, (std::vector<double>{1.0 / 64, 1.0 / 8, 1.0, 8.0})) << text;
  }
}

TEST(ParseKappaList, RefusesAnyBadEntryOrNone) {
  auto bad_entry = parse_kappa_list("1/64, abc, 1");
  ASSERT_FALSE(bad_entry.ok());
  EXPECT_EQ(bad_entry.error().message, "kappa 'abc' is not a number of bits (e.g. 1/8 or 0.125)");
  EXPECT_FALSE(parse_kappa_list("1, -8").ok());
  for (const char* none : {"", ",,", " , "}) {
    auto r = parse_kappa_list(none);
    ASSERT_FALSE(r.ok()) << "'" << none << "'";
    EXPECT_EQ(r.error().message, "expected kappa values in bits separated by commas");
  }
}

TEST(ShapeModelConfig, EveryPresetAloneIsThePresetSizedForTheData) {
  ASSERT_EQ(model_preset_names(), (std::vector<std::string>{"tiny", "small", "ft-1.5b", "ft-8b"}));
  for (const std::string& name : model_preset_names()) {
    SCOPED_TRACE(name);
    ShapeOverrides o;
    o.preset = name;
    auto shaped = shape_model_config(o, kVocab, kSeqLen);
    ASSERT_TRUE(shaped.ok()) << shaped.error().message;
    ModelConfig want = *model_preset(name);
    want.latent_bits = kDefaultLatentBits;
    want.vocab_size = kVocab;  // the data's (the paper's shapes have 2^17 tokens)
    want.max_seq_len = std::max(want.max_seq_len, kSeqLen);
    EXPECT_EQ(config_to_json(*shaped), config_to_json(want));
  }
  expect_error(status_of(model_preset("huge")), {"preset 'huge'", "tiny or small or ft-1.5b or ft-8b"});
}

TEST(ShapeModelConfig, OverridesChangeOnlyWhatTheyName) {
  ShapeOverrides o;
  o.dim = 96, o.heads = 3, o.layers = 3, o.latent_bits = 4;
  auto m = shape_model_config(o, 10, 200);
  ASSERT_TRUE(m.ok()) << m.error().message;
  const ModelConfig small = *model_preset("small");
  EXPECT_EQ(m->dim, 96);
  EXPECT_EQ(m->n_heads, 3);
  EXPECT_EQ(m->n_kv_heads, 3) << "heads sets the kv heads too";
  EXPECT_EQ(m->head_dim, 32);
  EXPECT_EQ(m->n_layers, 3);
  EXPECT_EQ(m->inject_after, 1) << "Z enters after the middle block";
  EXPECT_EQ(m->ffn_hidden, small.ffn_hidden) << "a new width keeps the preset's FFN width";
  EXPECT_EQ(m->latent_bits, 4);
  EXPECT_EQ(m->vocab_size, 10);
  EXPECT_EQ(m->max_seq_len, 200) << "room for the data's sequences";
  o.kv_heads = 1, o.ffn = 24;
  m = shape_model_config(o, 10, 8);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->n_kv_heads, 1);
  EXPECT_EQ(m->ffn_hidden, 24);
  EXPECT_EQ(m->max_seq_len, small.max_seq_len) << "never below the preset's context";
}

TEST(ShapeModelConfig, ErrorsNameFieldsInCoreWordsOrTheCallers) {
  const ShapeOverrides kFresh;  // the defaults, assigned back between the cases
  ShapeOverrides o;
  o.dim = 30, o.heads = 4;
  expect_error(status_of(shape_model_config(o, kVocab, kSeqLen)), {"dim 30 is not a multiple of heads 4"});
  auto flagged = shape_model_config(o, kVocab, kSeqLen, dashed);
  ASSERT_FALSE(flagged.ok());
  EXPECT_NE(flagged.error().message.find("--dim 30 is not a multiple of --heads 4"), std::string::npos)
      << flagged.error().message;
  o = kFresh;
  o.layers = 1;
  expect_error(status_of(shape_model_config(o, kVocab, kSeqLen)), {"layers 1:", "at least 2 blocks"});
  o.latent_bits = 0;
  EXPECT_TRUE(shape_model_config(o, kVocab, kSeqLen).ok()) << "one block is enough without Z";
  o = kFresh;
  o.latent_bits = 25;
  expect_error(status_of(shape_model_config(o, kVocab, kSeqLen)), {"latent_bits 25", "0..20", "H"});
  o = kFresh;
  o.dim = -8;
  expect_error(status_of(shape_model_config(o, kVocab, kSeqLen)), {"dim -8", "positive"});
  o = kFresh;
  o.preset = "huge";
  expect_error(status_of(shape_model_config(o, kVocab, kSeqLen)), {"preset 'huge'", "tiny or small"});
  o = kFresh;
  o.heads = 4, o.kv_heads = 3;
  expect_error(status_of(shape_model_config(o, kVocab, kSeqLen)), {"n_kv_heads"});
}

TEST(TrainConfigJson, TodaysRunRowsLoadAndWriteBackUnchanged) {
  const json stored = json::parse(test::kTrainJsonBeforeFieldLists);
  auto t = train_config_from_json(stored, "runs.db: run 'old'");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->dataset, "coinflip");
  EXPECT_EQ(t->preset, "tiny");
  EXPECT_EQ(t->steps, 1);
  EXPECT_EQ(t->batch, 2);
  EXPECT_EQ(t->seed, 7u);
  EXPECT_EQ(t->lr, 0.003f);
  EXPECT_FALSE(t->init.post_sampler_bitlinear);
  EXPECT_EQ(t->init.post_sampler_std, 0.04f);
  EXPECT_EQ(t->dataset_options, (json{{"coinflip_eps", 0.25}, {"coinflip_len", 32}}));
  EXPECT_EQ(t->free_bits, "per-pair");  // trained before the batch-mean form existed
  // Written back: every stored key with its value; fields added since only add keys at defaults,
  // except the free-bits form, which says how the old run was trained.
  const json back = train_config_to_json(*t);
  for (const auto& [k, v] : stored.items()) EXPECT_EQ(back.value(k, json()), v) << k;
  for (const auto& [k, v] : back.items())
    if (!stored.contains(k) && k != "free_bits") {
      EXPECT_EQ(v, train_config_to_json(TrainConfig{})[k]) << k;
    }
  EXPECT_EQ(back["free_bits"], "per-pair");
}

TEST(TrainConfigJson, FreeBitsFormIsStoredAndOldRunsKeepPerPair) {
  EXPECT_EQ(TrainConfig{}.free_bits, "batch-mean");  // new runs: the form that reproduces Figure 4
  EXPECT_EQ(TrainConfig{}.free_bits_form(), FreeBitsForm::BatchMean);
  for (const char* form : {"batch-mean", "per-pair"}) {
    TrainConfig c;
    c.free_bits = form;
    auto back = train_config_from_json(train_config_to_json(c), "x");
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->free_bits, form);
  }
  auto old = train_config_from_json(json{{"kappa_nats", 0.5}}, "x");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old->free_bits_form(), FreeBitsForm::PerPair);
  expect_error(status_of(train_config_from_json(json{{"free_bits", "kingma"}}, "ck/trainer.json")),
               {"ck/trainer.json", "free_bits \"kingma\"", "batch-mean or per-pair"});
  expect_error(status_of(parse_free_bits("per pair")), {"\"per pair\"", "batch-mean or per-pair"});
  EXPECT_STREQ(free_bits_name(*parse_free_bits("per-pair")), "per-pair");
}

TEST(TrainConfigJson, TheKeysWrittenAreThoseOfEveryRunSoFar) {
  std::set<std::string> keys;
  const json written = train_config_to_json(TrainConfig{});
  for (const auto& [k, v] : written.items()) keys.insert(k);
  const std::set<std::string> want = {"dataset", "preset", "steps", "batch", "lr", "min_lr_frac", "warmup",
                                      "weight_decay", "beta1", "beta2", "adam_eps", "grad_clip", "kappa_nats",
                                      "kappa_start_nats", "kappa_anneal_steps", "seed", "eval_every",
                                      "checkpoint_every", "init_std", "init_scale_residual", "init_post_sampler_std",
                                      "init_zeta_std", "init_post_sampler_bitlinear",
                                      // added with text training and benchmarks (issue 13)
                                      "keep_checkpoints", "val_sequences", "init_from", "bench_tasks", "bench_every",
                                      "bench_data", "bench_max_new_tokens",
                                      // added with the batch-mean free bits (issue 22)
                                      "free_bits"};
  EXPECT_EQ(keys, want);
  // Missing keys keep the defaults (rows older than a field).
  auto t = train_config_from_json(json{{"steps", 5}}, "x");
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->steps, 5);
  EXPECT_EQ(train_config_to_json(*t).dump(), [] {
    TrainConfig d;
    d.steps = 5;
    d.free_bits = "per-pair";  // a row without the key was trained per pair
    return train_config_to_json(d).dump();
  }());
}

TEST(TrainConfigJson, TypesAreStrictAndErrorsNameTheFileAndKey) {
  const std::vector<std::pair<json, std::vector<std::string>>> bad = {
      {{{"steps", 3.5}}, {"trainer.json", "'steps'", "integer", "3.5"}},
      {{{"steps", "3"}}, {"trainer.json", "'steps'", "integer"}},
      {{{"lr", "fast"}}, {"trainer.json", "'lr'", "number"}},
      {{{"seed", -1}}, {"trainer.json", "'seed'", "-1"}},
      {{{"batch", 4294967296}}, {"trainer.json", "'batch'"}},
      {{{"init_scale_residual", 1}}, {"trainer.json", "'init_scale_residual'", "true or false"}},
      {{{"dataset", 3}}, {"trainer.json", "'dataset'", "string"}},
      {{{"steps", 0}}, {"trainer.json", "steps 0", "positive"}},
      {{{"beta2", 1.0}}, {"trainer.json", "beta2 1", "[0, 1)"}},
      {json::array({1, 2}), {"trainer.json", "object"}},
  };
  for (const auto& [j, needles] : bad) {
    SCOPED_TRACE(j.dump());
    expect_error(status_of(train_config_from_json(j, "ck/trainer.json")), needles);
  }
}

TEST(TrainConfigValidate, NamesFieldsByKeyOrThroughTheCallersNamer) {
  TrainConfig t;
  t.lr = 0;
  expect_error(t.validate(), {"lr 0: must be positive"});
  ASSERT_FALSE(t.validate(dashed).ok());
  EXPECT_EQ(t.validate(dashed).error().message.rfind("--lr 0", 0), 0u) << t.validate(dashed).error().message;
  t = {};
  t.kappa_nats = -0.5f;
  expect_error(t.validate(), {"kappa_nats -0.5", ">= 0"});
  t = {};
  t.kappa_start_nats = std::numeric_limits<float>::quiet_NaN();
  expect_error(t.validate(), {"kappa_start_nats", "finite"});
  t = {};
  t.min_lr_frac = 1.5f;
  expect_error(t.validate(), {"min_lr_frac 1.5", "[0, 1]"});
  t = {};
  t.dataset.clear();
  expect_error(t.validate(), {"dataset", "empty"});
  EXPECT_TRUE(TrainConfig{}.validate().ok());
}

TEST(SampleConfigFields, BoundsComeFromTheFieldList) {
  SampleConfig s;
  EXPECT_TRUE(s.validate().ok());
  s.temperature = -0.5f;
  expect_error(s.validate(), {"temperature -0.5", ">= 0"});
  s = {};
  s.top_k = -1;
  expect_error(s.validate(), {"top_k -1"});
  s = {};
  s.max_new_tokens = 0;
  expect_error(s.validate(), {"max_new_tokens 0", "positive"});
}

TEST(Fields, BoundsReadAsWords) {
  EXPECT_EQ(bounds_text(kPositive, true), "positive");
  EXPECT_EQ(bounds_text(kNonNegative, false), ">= 0");
  EXPECT_EQ(bounds_text(closed_range(0, 20), true), "in 0..20");
  EXPECT_EQ(bounds_text(closed_range(0, 1), false), "in [0, 1]");
  EXPECT_EQ(bounds_text(half_open_range(0, 1), false), "in [0, 1)");
  EXPECT_EQ(bounds_text(kAnyValue, false), "a finite number");
  EXPECT_EQ(find_field<ShapeOverrides>("kv_heads").key, std::string("kv_heads"));
}

// ---- RunConfig: the run row's config, one writer and one reader ----------------------------

TEST(RunConfig, WhatTheTrainerWritesReadsBack) {
  ModelConfig m = *model_preset("tiny");
  m.latent_bits = 6;
  TrainConfig t;
  t.dataset = "coinflip", t.preset = "tiny", t.steps = 1234, t.kappa_nats = 0.25f;
  auto c = parse_run_config(run_config_json(m, nullptr, t), "runs.db: run 'r'");
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_TRUE(c->model && c->train);
  EXPECT_EQ(c->model->latent_bits, 6);
  EXPECT_EQ(c->model->n_layers, m.n_layers);
  EXPECT_EQ(train_config_to_json(*c->train), train_config_to_json(t));
  EXPECT_EQ(c->tokens_at(100), -1) << "no sequence length in a coin-flip row";
}

TEST(RunConfig, OlderRowsLoadWithTheDocumentedDefaults) {
  // A row written before "free_bits" existed was trained per pair; one `ftx eval` made for
  // scores has neither part.
  auto old = parse_run_config(R"({"train": {"dataset": "synthetic", "steps": 10}})", "w");
  ASSERT_TRUE(old.ok()) << old.error().message;
  ASSERT_TRUE(old->train.has_value());
  EXPECT_FALSE(old->model.has_value());
  EXPECT_EQ(old->train->free_bits_form(), FreeBitsForm::PerPair);
  EXPECT_EQ(old->train->batch, TrainConfig{}.batch);
  auto scores = parse_run_config(R"({"samples": 4})", "w");
  ASSERT_TRUE(scores.ok());
  EXPECT_FALSE(scores->train || scores->model);
}

TEST(RunConfig, TokensSeenByATextRun) {
  auto c = parse_run_config(R"({"train": {"dataset": "text", "batch": 8, "text_seq_len": 129}})", "w");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->tokens_at(10), int64_t{10} * 8 * 128);
}

TEST(RunConfig, WrongTypesAndNonObjectsNameTheRunAndTheKey) {
  expect_error(status_of(parse_run_config("{not json", "runs.db: run 'r'")), {"runs.db: run 'r'", "not a JSON object"});
  expect_error(status_of(parse_run_config(R"({"train": 3})", "runs.db: run 'r'")), {"runs.db: run 'r'", "\"train\""});
  expect_error(status_of(parse_run_config(R"({"train": {"steps": "many"}})", "runs.db: run 'r'")),
               {"runs.db: run 'r'", "steps"});
}

}  // namespace
}  // namespace ftx

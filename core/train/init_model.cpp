#include "core/train/init_model.h"

#include "core/io/model_file.h"

namespace ftx {

namespace {
Status check_tokenizer(const ModelInfo& info, const BatchSource& data) {
  if (!info.tokenizer)
    return make_error(info.path + ": has no tokenizer, so its token ids cannot be matched to " + data.name());
  if (info.tokenizer->fingerprint() != data.tokenizer().fingerprint())
    return make_error(data.name() + ": tokenized with another tokenizer (fingerprint " +
                      data.tokenizer().fingerprint().substr(0, 12) + ") than " + info.path + " (fingerprint " +
                      info.tokenizer->fingerprint().substr(0, 12) + ")");
  return {};
}
}  // namespace

Result<ModelInfo> check_init_model(const std::string& path, const BatchSource& data) {
  auto file = ModelFile::open(path);
  if (!file) return file.error();
  ModelInfo info = (*file)->info();
  info.path = path;
  FTX_TRY(check_tokenizer(info, data));
  return info;
}

Result<ModelParams> read_init_model(const std::string& path, const BatchSource& data) {
  auto src = read_model_params(path);
  if (!src) return src.error();
  src->info.path = path;
  FTX_TRY(check_tokenizer(src->info, data));
  return src;
}

}  // namespace ftx

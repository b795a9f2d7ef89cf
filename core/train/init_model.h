// The model a run starts from when TrainConfig::init_from names one (ftx train --init, the
// studio's "Start from"): a checkpoint directory or a model file, whose shape, weights and
// tokenizer the run takes. Both front ends check it the same way: the training data must be
// tokenized by the model's own tokenizer, or its token ids would mean other words.
//
// Deliberately not here: reading the file (core/io/model_params.h), starting the run
// (Trainer::start), the kappa that ftx upcycle recorded (recorded_kappa_nats).
#pragma once
#include <string>

#include "core/data/batch_source.h"
#include "core/io/model_params.h"

namespace ftx {

// Headers only (ModelFile::open: milliseconds, fit for a form's Start button): the file's info,
// or a one-line error naming the file and the data when the tokenizers differ.
Result<ModelInfo> check_init_model(const std::string& path, const BatchSource& data);

// The same check, then every parameter in fp32: seconds for a 135M model, so off the UI thread.
Result<ModelParams> read_init_model(const std::string& path, const BatchSource& data);

}  // namespace ftx

// A whole file mapped read-only into memory (mmap, MAP_PRIVATE, PROT_READ): how large checkpoints
// (safetensors shards, GGUF files) are read without copying them. Pages come from the page cache
// when first touched, so opening an 8B model costs nothing until its weights are used, and a bf16
// tensor is used in place. Move-only; unmapped on destruction. An empty file maps to no memory
// (data() null, size() 0).
//
// Deliberately not here: parsing, alignment policy (readers check the alignment they need), writes.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/base/result.h"

namespace ftx {

class MappedFile {
 public:
  // Maps `path`; errors "PATH: cannot open: ..." / "PATH: mmap failed: ..." / "PATH: is a directory".
  static Result<MappedFile> open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Tells the kernel that [offset, offset + bytes) will be read soon, in order (madvise
  // WILLNEED): a loader calls it before a pass over a tensor. Errors are ignored (a hint).
  void will_need(uint64_t offset, uint64_t bytes) const;

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ftx

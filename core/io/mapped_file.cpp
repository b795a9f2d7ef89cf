#include "core/io/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "core/util/fs.h"

namespace ftx {

Result<MappedFile> MappedFile::open(const std::string& path) {
  uint64_t size = 0;
  auto fd = open_for_read(path, &size);
  if (!fd) return fd.error();
  MappedFile m;
  m.path_ = path;
  m.size_ = size;
  if (size == 0) return m;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd->get(), 0);
  if (p == MAP_FAILED) return make_error(path + ": mmap failed: " + errno_text(errno));
  m.data_ = static_cast<const uint8_t*>(p);
  return m;  // the mapping outlives the descriptor
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void MappedFile::will_need(uint64_t offset, uint64_t bytes) const {
  if (!data_ || offset >= size_) return;
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const uint64_t end = std::min(size_, offset + bytes);
  ::madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_WILLNEED);
}

}  // namespace ftx

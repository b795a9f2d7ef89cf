// Small POSIX file helpers for the checkpoint readers and writers: an owning file descriptor,
// exact positional reads, a streaming writer that fsyncs before it reports success, directory
// fsync and recursive removal. Every failure comes back as a one-line Error naming the path and
// the errno text ("<path>: write failed: No space left on device").
//
// Deliberately not here: buffering policies, mmap, portability beyond POSIX (Linux and macOS),
// any knowledge of file formats.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/base/result.h"

namespace ftx {

// strerror text for an errno value ("No space left on device").
std::string errno_text(int err);

// Owns one file descriptor; closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_ = -1;
};

// Opens `path` read-only (O_CLOEXEC); refuses directories. `size` receives the file size.
Result<UniqueFd> open_for_read(const std::string& path, uint64_t* size);

// Reads exactly n bytes at `offset` (retries on EINTR and short reads). A read that hits the end
// of the file is an error that says the file is truncated.
Status pread_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path);

// Reads a whole file that must not exceed max_bytes (config.json, index files, trainer.json).
Result<std::string> read_small_file(const std::string& path, uint64_t max_bytes);

// Streams bytes into a new file (created or truncated, mode 0644). finish() fsyncs and closes and
// is the only way to success; a writer destroyed without finish() (or after a failed write)
// removes its partial file.
class FileWriter {
 public:
  static Result<FileWriter> create(const std::string& path);
  FileWriter(FileWriter&& o) noexcept;
  FileWriter& operator=(FileWriter&&) = delete;
  FileWriter(const FileWriter&) = delete;
  ~FileWriter();
  Status write(const void* data, uint64_t n);
  Status finish();
  const std::string& path() const { return path_; }

 private:
  FileWriter(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  void discard();
  std::string path_;
  UniqueFd fd_;
  bool done_ = false;
};

// Writes `data` to `path` through FileWriter (fsynced).
Status write_file_durable(const std::string& path, std::string_view data);

// fsync of a directory, so that created or renamed entries in it survive a crash.
Status fsync_dir(const std::string& path);

// Removes a file or a directory tree; a missing path is not an error.
Status remove_tree(const std::string& path);

// dir + "/" + name.
std::string join(const std::string& dir, const std::string& name);
// Whether `path` names something, following symbolic links (the Hugging Face cache links snapshot
// files to blobs): a dangling link does not exist, as open() would find.
bool path_exists(const std::string& path);

}  // namespace ftx

// POSIX implementations of core/util/fs.h. Every syscall result is checked; EINTR is retried.
#include "core/util/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace ftx {
namespace {

// Largest single read/write request (Linux caps a syscall at about 2 GiB anyway).
constexpr uint64_t kMaxIoChunk = uint64_t{1} << 30;

Error io_error(const std::string& path, const char* what, int err) {
  return make_error(path + ": " + what + ": " + errno_text(err));
}

}  // namespace

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<UniqueFd> open_for_read(const std::string& path, uint64_t* size) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return io_error(path, "cannot open", errno);
  UniqueFd owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error(path, "cannot stat", errno);
  if (S_ISDIR(st.st_mode)) return make_error(path + ": is a directory, expected a file");
  if (!S_ISREG(st.st_mode)) return make_error(path + ": not a regular file");
  *size = static_cast<uint64_t>(st.st_size);
  return owned;
}

Status pread_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<unsigned char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    const uint64_t want = std::min(n - done, kMaxIoChunk);
    const ssize_t got = ::pread(fd, p + done, static_cast<size_t>(want), static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return io_error(path, "read failed", errno);
    }
    if (got == 0)
      return make_error(path + ": unexpected end of file at byte " + std::to_string(offset + done) +
                        " (file truncated while reading?)");
    done += static_cast<uint64_t>(got);
  }
  return {};
}

Result<std::string> read_small_file(const std::string& path, uint64_t max_bytes) {
  uint64_t size = 0;
  auto fd = open_for_read(path, &size);
  if (!fd) return fd.error();
  if (size > max_bytes)
    return make_error(path + ": file is " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(max_bytes) + "-byte limit for this kind of file");
  std::string text(size, '\0');
  FTX_TRY(pread_exact(fd->get(), text.data(), size, 0, path));
  return text;
}

Result<FileWriter> FileWriter::create(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return io_error(path, "cannot create", errno);
  return FileWriter(path, UniqueFd(fd));
}

FileWriter::FileWriter(FileWriter&& o) noexcept : path_(std::move(o.path_)), fd_(std::move(o.fd_)), done_(o.done_) {
  o.done_ = true;  // the moved-from writer must not unlink the file
}

FileWriter::~FileWriter() { discard(); }

void FileWriter::discard() {
  if (done_) return;
  done_ = true;
  fd_ = UniqueFd();
  ::unlink(path_.c_str());
}

Status FileWriter::write(const void* data, uint64_t n) {
  if (done_) return make_error(path_ + ": write after the file was closed");
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t put = ::write(fd_.get(), p + done, static_cast<size_t>(std::min(n - done, kMaxIoChunk)));
    if (put < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      discard();
      return io_error(path_, "write failed", err);
    }
    done += static_cast<uint64_t>(put);
  }
  return {};
}

Status FileWriter::finish() {
  if (done_) return make_error(path_ + ": finish after the file was closed");
  if (::fsync(fd_.get()) != 0) {
    const int err = errno;
    discard();
    return io_error(path_, "fsync failed", err);
  }
  if (::close(fd_.release()) != 0) {
    const int err = errno;
    discard();
    return io_error(path_, "close failed", err);
  }
  done_ = true;
  return {};
}

Status write_file_durable(const std::string& path, std::string_view data) {
  auto w = FileWriter::create(path);
  if (!w) return w.error();
  FTX_TRY(w->write(data.data(), data.size()));
  return w->finish();
}

Status fsync_dir(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return io_error(path, "cannot open directory for fsync", errno);
  UniqueFd owned(fd);
  // Some file systems do not support fsync on directories (EINVAL): nothing more can be done.
  if (::fsync(fd) != 0 && errno != EINVAL) return io_error(path, "directory fsync failed", errno);
  return {};
}

Status remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return make_error(path + ": cannot remove: " + ec.message());
  return {};
}

std::string join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace ftx

#include "history/trace_file.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strata::history {

TraceFile::TraceFile(const std::string& path) : path_(path), target_(path) {
  gz_ = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  struct stat st {};
  mode_t mode = 0644;
  if (lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      std::unique_ptr<char, decltype(&std::free)> real(realpath(path.c_str(), nullptr), &std::free);
      if (real == nullptr) Fail(errno);  // a dangling or looping link
      target_ = real.get();
      if (stat(target_.c_str(), &st) != 0) Fail(errno);
    }
    if (!S_ISREG(st.st_mode)) {
      throw std::runtime_error(absl::StrCat("strata: cannot write to ", path,
                                            ": not a regular file (a device, FIFO or directory)"));
    }
    mode = st.st_mode & 07777;  // the file keeps its permissions
  }
  std::vector<char> name(target_.begin(), target_.end());
  const char kSuffix[] = ".XXXXXX";
  name.insert(name.end(), kSuffix, kSuffix + sizeof kSuffix);  // with the NUL
  fd_ = mkstemp(name.data());
  if (fd_ < 0) Fail(errno);
  tmp_ = name.data();
  if (fchmod(fd_, mode) != 0) Fail(errno);
}

TraceFile::~TraceFile() {
  if (fd_ >= 0) close(fd_);
  if (!tmp_.empty()) std::remove(tmp_.c_str());
}

void TraceFile::Fail(int err) const {
  throw std::runtime_error(absl::StrCat("strata: cannot write to ", path_, ": ",
                                        err != 0 ? std::strerror(err) : "write failed"));
}

void TraceFile::Commit(const std::string& text) {
  errno = 0;
  bool ok = false;
  const int fd = fd_;
  fd_ = -1;  // the stream below owns it now
  if (gz_) {
    if (gzFile f = gzdopen(fd, "wb"); f != nullptr) {
      ok = true;
      for (std::size_t at = 0; ok && at < text.size();) {  // gzwrite takes an unsigned count
        const auto n = static_cast<unsigned>(std::min<std::size_t>(text.size() - at, 1 << 30));
        ok = gzwrite(f, text.data() + at, n) == static_cast<int>(n);
        at += n;
      }
      ok = gzclose(f) == Z_OK && ok;
    } else {
      close(fd);
    }
  } else if (std::FILE* f = fdopen(fd, "wb"); f != nullptr) {
    ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    ok = std::fclose(f) == 0 && ok;
  } else {
    close(fd);
  }
  if (!ok || std::rename(tmp_.c_str(), target_.c_str()) != 0) Fail(errno);
  tmp_.clear();
}

}  // namespace strata::history

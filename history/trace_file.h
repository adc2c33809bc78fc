// TraceFile: writes a trace (or any text) to a path so that a reader never sees half a file and a
// failure loses nothing already there: the text goes to a new temporary file beside the target
// (gzip-compressed when the path ends in ".gz"), renamed over the target once complete.
//
// - The target is the file a symbolic link names (the link stays), and never a device, FIFO or
//   directory (refused: renaming over one would replace it).
// - The temporary file has a unique name (mkstemp), so no file of the user's is overwritten.
// - Opening comes first and may fail before the caller gives anything up (HistoryRecorder::StopTo
//   opens, then stops the recording, then commits).
//
// Contract: one object per write, not shared between threads. Throws std::runtime_error naming the
// path when the file cannot be opened or written; the destructor removes an uncommitted temporary.
#pragma once

#include <string>

namespace strata::history {

class TraceFile {
 public:
  explicit TraceFile(const std::string& path);
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // Writes `text` and renames the temporary over the target. Call once.
  void Commit(const std::string& text);

 private:
  [[noreturn]] void Fail(int err) const;

  std::string path_;    // as given, for messages
  std::string target_;  // what the rename replaces
  std::string tmp_;     // the temporary; empty once committed
  int fd_ = -1;
  bool gz_ = false;
};

}  // namespace strata::history

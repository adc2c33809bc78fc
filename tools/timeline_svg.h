// TimelineSvg: a memory timeline (requested / allocated / reserved bytes over the events of a
// replay) drawn as one standalone SVG file that a browser opens directly.
//
// Samples are downsampled while they arrive so that a plot of a million events stays small: at
// most max_points buckets of consecutive samples are kept, and a bucket keeps the maximum of each
// series (peaks are never lost; short dips may be). When the buckets run out, neighbours merge
// pairwise, so memory stays O(max_points) without knowing the trace length in advance.
//
// Contract
// - Thread safety: none; one writer.
// - Add() takes event indices in non-decreasing order; std::invalid_argument otherwise.
// - Write(path) writes path + ".tmp" and renames it over path, so a reader never sees half a
//   file; it throws std::runtime_error naming the path and the OS error when it cannot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::tools {

class TimelineSvg {
 public:
  struct Sample {
    std::uint64_t first_event;  // event index of the bucket's first sample (the x coordinate)
    std::uint64_t last_event;
    std::uint64_t requested;  // maxima over the bucket
    std::uint64_t allocated;
    std::uint64_t reserved;
    std::uint64_t count;  // samples merged into this bucket
  };

  explicit TimelineSvg(std::string title, std::size_t max_points = 2000);

  void Add(std::uint64_t event_index, std::uint64_t requested, std::uint64_t allocated,
           std::uint64_t reserved);
  // A dashed horizontal line with a label (e.g. PyTorch's peak reserved, for comparison).
  void AddReferenceLine(std::string label, std::uint64_t bytes);
  // A second title line (configuration, figures).
  void set_subtitle(std::string subtitle) { subtitle_ = std::move(subtitle); }

  const std::vector<Sample>& samples() const { return buckets_; }
  std::uint64_t num_added() const { return num_added_; }
  // Maxima over everything added (exact, not downsampled).
  std::uint64_t peak_requested() const { return peak_requested_; }
  std::uint64_t peak_allocated_bytes() const { return peak_allocated_; }
  std::uint64_t peak_reserved_bytes() const { return peak_reserved_; }

  std::string Render() const;
  void Write(const std::string& path) const;

 private:
  struct Reference {
    std::string label;
    std::uint64_t bytes;
  };

  std::string title_;
  std::string subtitle_;
  std::size_t max_points_;
  std::uint64_t bucket_width_ = 1;  // samples per full bucket
  std::uint64_t num_added_ = 0;
  std::uint64_t peak_requested_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::vector<Sample> buckets_;
  std::vector<Reference> references_;
};

}  // namespace strata::tools

#pragma once
/// WebDataset shards: a tar whose members are grouped into samples by key (`000123.jpg` +
/// `000123.cls`). ScanWebDatasetShard indexes one shard: for every sample, the byte range of its
/// image member and its label, so the loader reads members straight from the shard.
///
/// Grouping follows the `webdataset` package: a member path splits into key and extension at the
/// first '.' of its last path component (`dir/abc.seg.png` -> key `dir/abc`, extension `seg.png`),
/// extensions compare lower-case, consecutive members with the same key form one sample, and
/// names whose last component starts with '.' or has no '.' (and top-level `__name__` entries)
/// are ignored.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ringloader/source_kind.h"

namespace ringloader {

struct WebDatasetOptions {
  /// Image extensions in order of preference; a sample's image is the first one present.
  std::vector<std::string> image_exts = {"jpg", "jpeg", "png", "webp"};
  /// The label member's extension: "json" reads the integer field `json_field` of a JSON
  /// object; any other ("cls", "txt") is a decimal integer (ASCII whitespace around it ignored).
  /// Empty: no labels (every label is -1).
  std::string label_key = "cls";
  std::string json_field = "label";
  /// True: `image_exts` are video extensions and a sample's member is its video (the index of
  /// rl.VideoShards); false: a video extension in `image_exts` is refused.
  bool video_members = false;
};

/// Label members larger than this are refused (as a bad label).
inline constexpr uint64_t kMaxLabelBytes = uint64_t{64} << 10;

struct ShardSample {
  std::string key;
  std::string member;   ///< The image member's path in the archive ("" when it has none).
  uint64_t offset = 0;  ///< Archive offset of the image member's data.
  int64_t length = 0;   ///< Its size in bytes.
  int64_t label = -1;
  std::string error;    ///< Non-empty: the sample is known bad (no image, bad label...).
};

struct ShardIndex {
  std::string url;
  uint64_t bytes = 0;   ///< Archive bytes read (the whole shard when complete).
  std::vector<ShardSample> samples;
  /// Non-empty when the shard could not be scanned to its end (truncated, corrupt header, the
  /// command of a pipe: URL failed): where, and why. The samples before that point are kept.
  std::string error;
};

/// Indexes a shard: `url` is a local path (kFile, whatever its name), or with kPipe
/// `pipe:COMMAND` (the stdout of `/bin/sh -c COMMAND` is scanned as a stream). Fails (NotFound,
/// PermissionDenied, InvalidArgument...) naming the shard only when it cannot be opened at all,
/// or for bad options.
absl::StatusOr<ShardIndex> ScanWebDatasetShard(const std::string& url, const WebDatasetOptions& options,
                                               SourceKind kind = SourceKind::kFile);

/// Splits a member path into key and lower-case extension, as the grouping does. False when the
/// member is ignored. Exposed for tests.
bool SplitMemberName(const std::string& name, std::string* key, std::string* ext);

/// Parses a decimal label (cls/txt member): ASCII whitespace around an optionally signed
/// integer. Exposed for tests.
absl::StatusOr<int64_t> ParseDecimalLabel(const std::string& text);

/// Finds the integer value of top-level field `field` of the JSON object in `text` (the last
/// one when repeated, as Python's json does). NotFound when absent, InvalidArgument when the
/// text is not a JSON object or the value is not an integer. Exposed for tests.
absl::StatusOr<int64_t> JsonIntegerField(const std::string& text, const std::string& field);

}  // namespace ringloader

#pragma once
/// A streaming tar reader: walks the headers of an archive read from a ByteSource and reports the
/// regular-file members (name, data offset, size), skipping their data unless asked for it.
///
/// Formats: POSIX ustar (name + prefix), GNU (long names and link names in `L`/`K` entries,
/// base-256 numeric fields), pax (`x` extended headers: path and size; `g` global headers are
/// accepted and ignored). Every header's checksum is verified. Directories, links, devices and
/// other non-regular entries are skipped. The archive ends at a zero block or at EOF on a header
/// boundary; EOF inside a header or inside a member's data is DataLoss naming the member and the
/// offset, after the members before it were returned.
///
/// The same code scans a local file (FileByteSource: large preads, member data skipped by seeking)
/// and a stream (any ByteSource whose Skip reads and discards).
///
/// Threading: a source and its reader belong to one thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringloader {

/// Bytes read in order.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// Reads up to `n` bytes into `dst`: how many were read; 0 only at the end of the data.
  virtual absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) = 0;
  /// Skips `n` bytes: how many were skipped (fewer only at the end). The default reads and
  /// discards.
  virtual absl::StatusOr<uint64_t> Skip(uint64_t n);
};

/// A local file read through pread in `chunk`-byte reads; Skip seeks.
class FileByteSource final : public ByteSource {
 public:
  /// Opens `path` (errors name it: NotFound, PermissionDenied, "is a directory"...).
  static absl::StatusOr<std::unique_ptr<FileByteSource>> Open(const std::string& path,
                                                              size_t chunk = size_t{1} << 20);
  ~FileByteSource() override;
  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) override;
  absl::StatusOr<uint64_t> Skip(uint64_t n) override;
  uint64_t size() const { return size_; }

 private:
  FileByteSource(std::string path, int fd, uint64_t size, size_t chunk);
  std::string path_;
  int fd_;
  uint64_t size_;
  uint64_t pos_ = 0;            // file offset of the next byte handed out
  std::vector<uint8_t> buf_;    // file bytes [buf_pos_, buf_pos_ + buf_len_)
  uint64_t buf_pos_ = 0;
  size_t buf_len_ = 0;
};

/// A regular member of an archive.
struct TarMember {
  std::string name;     ///< Full path (pax path, GNU long name or ustar prefix/name).
  uint64_t offset = 0;  ///< Archive offset of the first data byte.
  uint64_t size = 0;    ///< Data bytes.
};

/// Walks an archive's members. Next() returns each regular member; its data is skipped by the
/// following Next() unless ReadData() consumed it first.
class TarReader {
 public:
  /// Longest GNU long name / pax header accepted (larger ones are DataLoss).
  static constexpr uint64_t kMaxMetaBytes = uint64_t{1} << 20;

  explicit TarReader(ByteSource* source) : source_(source) {}
  /// The next regular member: true and `*member` filled; false at the end of the archive.
  /// DataLoss on a truncated archive or a corrupt header (message: where, and the last member).
  absl::StatusOr<bool> Next(TarMember* member);
  /// Reads the data of the member Next() just returned (at most `limit` bytes: a larger member
  /// is OutOfRange and its data is skipped). DataLoss when the archive ends inside it.
  absl::Status ReadData(uint64_t limit, std::string* out);
  /// Archive bytes consumed so far.
  uint64_t position() const { return pos_; }
  /// After Next() or ReadData() failed: true when the failure is that the data of the member
  /// returned last is cut off (that member is incomplete and must be dropped).
  bool last_member_truncated() const { return last_truncated_; }

 private:
  // Reads exactly n bytes, or fewer at EOF (returned count).
  absl::StatusOr<size_t> ReadFully(uint8_t* dst, size_t n);
  // Moves past the current member's data and padding.
  absl::Status SkipRest();
  absl::Status ReadMeta(uint64_t size, const std::string& what, uint64_t header_at, std::string* out);

  ByteSource* source_;
  uint64_t pos_ = 0;
  uint64_t data_left_ = 0;   // unread data bytes of the current entry
  uint64_t padding_ = 0;     // padding after them
  std::string current_;      // name of the member Next() returned last (for messages)
  uint64_t current_at_ = 0;  // its header offset
  bool done_ = false;
  bool last_truncated_ = false;
  bool in_member_ = false;   // data_left_ belongs to the member Next() returned
};

/// Parses a numeric header field: octal (NUL/space padded) or GNU base-256. Exposed for tests.
absl::StatusOr<int64_t> ParseTarNumber(const uint8_t* field, size_t size);

/// Bytes in a tar header (and the unit archives are padded to).
inline constexpr size_t kTarBlock = 512;

/// The fields of one header block that say what follows it.
struct TarHeader {
  char type = 0;      ///< typeflag ('0', '\0' and '7' regular, 'L' GNU long name, 'x' pax...).
  uint64_t size = 0;  ///< The size field (a pax `size` record that follows may override it).
  std::string name;   ///< The name field, with the ustar prefix when the block is POSIX ustar.
  /// A regular file's header (what TarReader returns as a member).
  bool regular() const { return type == '0' || type == '7' || (type == '\0' && (name.empty() || name.back() != '/')); }
};

/// Parses a `kTarBlock`-byte header block, checksum verified: DataLoss "bad header checksum<where>:
/// stored S, computed C" or "bad size field<where>: ..." when it is not a valid header (`where`,
/// e.g. " at offset N", names the block). An all-zero block (the end of an archive) has a bad
/// checksum here; TarReader looks for that first.
absl::StatusOr<TarHeader> ParseTarHeader(const uint8_t* block, absl::string_view where = "");

}  // namespace ringloader

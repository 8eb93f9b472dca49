#include "dataset/tar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"

namespace ringloader {
namespace {

constexpr size_t kBlock = kTarBlock;

uint64_t Padding(uint64_t size) { return (kBlock - size % kBlock) % kBlock; }

// A NUL-terminated field of at most `size` bytes.
std::string FieldString(const uint8_t* field, size_t size) {
  const auto* begin = reinterpret_cast<const char*>(field);
  return std::string(begin, strnlen(begin, size));
}

}  // namespace

absl::StatusOr<uint64_t> ByteSource::Skip(uint64_t n) {
  uint8_t scratch[64 << 10];
  uint64_t skipped = 0;
  while (skipped < n) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof(scratch), n - skipped));
    RL_ASSIGN_OR_RETURN(size_t got, Read(scratch, want));
    if (got == 0) break;
    skipped += got;
  }
  return skipped;
}

FileByteSource::FileByteSource(std::string path, int fd, uint64_t size, size_t chunk)
    : path_(std::move(path)), fd_(fd), size_(size), buf_(std::max<size_t>(chunk, kBlock)) {}

FileByteSource::~FileByteSource() { close(fd_); }

absl::StatusOr<std::unique_ptr<FileByteSource>> FileByteSource::Open(const std::string& path, size_t chunk) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status status = ErrnoStatus(errno, "fstat", path);
    close(fd);
    return status;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, S_ISDIR(st.st_mode) ? " is a directory, not a tar shard" : " is not a regular file"));
  }
  return std::unique_ptr<FileByteSource>(new FileByteSource(path, fd, static_cast<uint64_t>(st.st_size), chunk));
}

absl::StatusOr<size_t> FileByteSource::Read(uint8_t* dst, size_t n) {
  if (pos_ >= size_ || n == 0) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - pos_));
  if (pos_ < buf_pos_ || pos_ >= buf_pos_ + buf_len_) {
    if (n >= buf_.size()) {
      // Large reads go straight to the caller.
      while (true) {
        const ssize_t got = pread(fd_, dst, n, static_cast<off_t>(pos_));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return ErrnoStatus(errno, "read", path_);
        pos_ += static_cast<uint64_t>(got);
        return static_cast<size_t>(got);
      }
    }
    ssize_t got;
    do {
      got = pread(fd_, buf_.data(), buf_.size(), static_cast<off_t>(pos_));
    } while (got < 0 && errno == EINTR);
    if (got < 0) return ErrnoStatus(errno, "read", path_);
    buf_pos_ = pos_;
    buf_len_ = static_cast<size_t>(got);
    if (got == 0) {
      size_ = pos_;  // the file shrank since it was opened
      return 0;
    }
  }
  const size_t avail = static_cast<size_t>(buf_pos_ + buf_len_ - pos_);
  const size_t take = std::min(n, avail);
  std::memcpy(dst, buf_.data() + (pos_ - buf_pos_), take);
  pos_ += take;
  return take;
}

absl::StatusOr<uint64_t> FileByteSource::Skip(uint64_t n) {
  const uint64_t skipped = std::min<uint64_t>(n, size_ - std::min(pos_, size_));
  pos_ += skipped;
  return skipped;
}

absl::StatusOr<int64_t> ParseTarNumber(const uint8_t* field, size_t size) {
  if (size == 0) return 0;
  if (field[0] & 0x80) {
    // GNU base-256: big-endian two's complement; 0x80 marks a positive value, 0xFF a negative.
    const bool negative = field[0] == 0xFF;
    if (!negative && field[0] != 0x80) {
      return absl::DataLossError("bad base-256 number: first byte must be 0x80 or 0xff");
    }
    uint64_t value = negative ? ~uint64_t{0} : 0;
    for (size_t i = 1; i < size; ++i) {
      if (((value >> 56) & 0xFF) != (negative ? 0xFFu : 0u)) {
        return absl::DataLossError("base-256 number does not fit 64 bits");
      }
      value = (value << 8) | field[i];
    }
    const auto result = static_cast<int64_t>(value);
    if ((result < 0) != negative) return absl::DataLossError("base-256 number does not fit 64 bits");
    return result;
  }
  size_t i = 0;
  while (i < size && (field[i] == ' ' || field[i] == 0)) ++i;
  uint64_t value = 0;
  for (; i < size && field[i] >= '0' && field[i] <= '7'; ++i) {
    // value * 8 + 7 must stay below 2^63.
    if (value >= (uint64_t{1} << 60)) return absl::DataLossError("octal number does not fit 63 bits");
    value = value * 8 + (field[i] - '0');
  }
  for (; i < size; ++i) {
    if (field[i] != ' ' && field[i] != 0) {
      return absl::DataLossError(absl::StrCat("bad octal number '", FieldString(field, size), "'"));
    }
  }
  return static_cast<int64_t>(value);
}

absl::StatusOr<TarHeader> ParseTarHeader(const uint8_t* h, absl::string_view where) {
  absl::StatusOr<int64_t> stored = ParseTarNumber(h + 148, 8);
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const uint8_t b = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += b;
    signed_sum += static_cast<int8_t>(b);
  }
  if (!stored.ok() || (*stored != static_cast<int64_t>(unsigned_sum) && *stored != signed_sum)) {
    return absl::DataLossError(absl::StrCat("bad header checksum", where, ": stored ",
                                            stored.ok() ? absl::StrCat(*stored) : "unreadable", ", computed ",
                                            unsigned_sum));
  }
  absl::StatusOr<int64_t> size = ParseTarNumber(h + 124, 12);
  if (!size.ok() || *size < 0) {
    return absl::DataLossError(
        absl::StrCat("bad size field", where, ": ", size.ok() ? "negative" : size.status().message()));
  }
  TarHeader header;
  header.type = static_cast<char>(h[156]);
  header.size = static_cast<uint64_t>(*size);
  header.name = FieldString(h, 100);
  // POSIX ustar ("ustar\0"): a prefix field extends the name; GNU ("ustar  ") uses that area for
  // other fields.
  if (std::memcmp(h + 257, "ustar\0", 6) == 0) {
    const std::string prefix = FieldString(h + 345, 155);
    if (!prefix.empty()) header.name = absl::StrCat(prefix, "/", header.name);
  }
  return header;
}

absl::StatusOr<size_t> TarReader::ReadFully(uint8_t* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    RL_ASSIGN_OR_RETURN(size_t got, source_->Read(dst + done, n - done));
    if (got == 0) break;
    done += got;
  }
  pos_ += done;
  return done;
}

absl::Status TarReader::SkipRest() {
  if (data_left_ > 0) {
    RL_ASSIGN_OR_RETURN(uint64_t skipped, source_->Skip(data_left_));
    pos_ += skipped;
    if (skipped < data_left_) {
      const uint64_t size = data_left_;
      data_left_ = 0;
      padding_ = 0;
      done_ = true;
      last_truncated_ = in_member_;
      return absl::DataLossError(absl::StrCat("truncated: member '", current_, "' (header at offset ", current_at_,
                                              ") needs ", size - skipped, " more bytes; the archive ends at offset ",
                                              pos_));
    }
    data_left_ = 0;
  }
  in_member_ = false;
  if (padding_ > 0) {
    RL_ASSIGN_OR_RETURN(uint64_t skipped, source_->Skip(padding_));
    pos_ += skipped;
    if (skipped < padding_) done_ = true;  // the data is whole; a missing pad just ends the archive
    padding_ = 0;
  }
  return absl::OkStatus();
}

absl::Status TarReader::ReadMeta(uint64_t size, const std::string& what, uint64_t header_at, std::string* out) {
  if (size > kMaxMetaBytes) {
    done_ = true;
    return absl::DataLossError(absl::StrCat("the ", what, " at offset ", header_at, " is ", size,
                                            " bytes, over the limit of ", kMaxMetaBytes));
  }
  out->resize(static_cast<size_t>(size));
  RL_ASSIGN_OR_RETURN(size_t got, ReadFully(reinterpret_cast<uint8_t*>(out->data()), out->size()));
  if (got < size) {
    done_ = true;
    return absl::DataLossError(absl::StrCat("truncated: the archive ends inside the ", what, " at offset ",
                                            header_at));
  }
  padding_ = Padding(size);
  return SkipRest();
}

namespace {

// Applies the records of a pax extended header ("<len> <key>=<value>\n" each) we care about.
absl::Status ParsePax(const std::string& data, uint64_t header_at, std::string* path, bool* have_path,
                      uint64_t* size, bool* have_size) {
  size_t p = 0;
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("bad pax header at offset ", header_at, ": ", why));
  };
  while (p < data.size()) {
    if (data[p] == '\0') break;  // some writers pad with NULs
    size_t q = p;
    uint64_t len = 0;
    while (q < data.size() && data[q] >= '0' && data[q] <= '9') {
      len = len * 10 + static_cast<uint64_t>(data[q] - '0');
      if (len > data.size()) return bad("record length past the header");
      ++q;
    }
    if (q == p || q >= data.size() || data[q] != ' ') return bad("record without a length");
    if (len < q - p + 3 || p + len > data.size() || data[p + len - 1] != '\n') return bad("record length mismatch");
    const std::string record = data.substr(q + 1, p + len - 1 - (q + 1));
    const size_t eq = record.find('=');
    if (eq == std::string::npos) return bad("record without '='");
    const std::string key = record.substr(0, eq);
    const std::string value = record.substr(eq + 1);
    if (key == "path") {
      *path = value;
      *have_path = !value.empty();
    } else if (key == "size") {
      uint64_t v = 0;
      if (value.empty()) return bad("empty size");
      for (char c : value) {
        if (c < '0' || c > '9' || v > (uint64_t{1} << 59)) return bad(absl::StrCat("bad size '", value, "'"));
        v = v * 10 + static_cast<uint64_t>(c - '0');
      }
      *size = v;
      *have_size = true;
    }
    p += len;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> TarReader::Next(TarMember* member) {
  if (done_) return false;
  RL_RETURN_IF_ERROR(SkipRest());
  if (done_) return false;
  std::string long_name, pax_path;
  bool have_long_name = false, have_pax_path = false, have_pax_size = false;
  uint64_t pax_size = 0;
  auto after = [&] { return current_.empty() ? std::string(" (first header)") : absl::StrCat(" (after member '", current_, "')"); };
  while (true) {
    const uint64_t header_at = pos_;
    uint8_t h[kBlock];
    RL_ASSIGN_OR_RETURN(size_t got, ReadFully(h, kBlock));
    const bool pending = have_long_name || have_pax_path || have_pax_size;
    if (got == 0 && !pending) {
      done_ = true;
      return false;
    }
    if (got < kBlock) {
      done_ = true;
      // Zero bytes cut short: the end-of-archive blocks were truncated, the archive is whole.
      if (!pending && std::all_of(h, h + got, [](uint8_t b) { return b == 0; })) return false;
      return absl::DataLossError(absl::StrCat("truncated: the archive ends inside the header at offset ", header_at,
                                              after()));
    }
    if (std::all_of(h, h + kBlock, [](uint8_t b) { return b == 0; })) {
      done_ = true;  // end-of-archive (a lone zero block is accepted too)
      if (pending) {
        return absl::DataLossError(absl::StrCat("an extended header is followed by the end of the archive at offset ",
                                                header_at));
      }
      return false;
    }
    absl::StatusOr<TarHeader> header = ParseTarHeader(h);
    if (!header.ok()) {
      done_ = true;
      // Parsed again for the message only: where the block is costs a string per header.
      return ParseTarHeader(h, absl::StrCat(" at offset ", header_at, after())).status();
    }
    uint64_t size = have_pax_size ? pax_size : header->size;
    const char type = header->type;
    std::string name;
    if (have_pax_path) {
      name = pax_path;
    } else if (have_long_name) {
      name = long_name;
    } else {
      name = std::move(header->name);
    }
    switch (type) {
      case 'L': {
        RL_RETURN_IF_ERROR(ReadMeta(size, "GNU long name", header_at, &long_name));
        long_name.resize(strnlen(long_name.data(), long_name.size()));
        have_long_name = true;
        continue;
      }
      case 'K': {
        std::string ignored;
        RL_RETURN_IF_ERROR(ReadMeta(size, "GNU long link name", header_at, &ignored));
        continue;
      }
      case 'x': {
        std::string data;
        RL_RETURN_IF_ERROR(ReadMeta(size, "pax header", header_at, &data));
        absl::Status parsed = ParsePax(data, header_at, &pax_path, &have_pax_path, &pax_size, &have_pax_size);
        if (!parsed.ok()) {
          done_ = true;
          return parsed;
        }
        continue;
      }
      case 'g': {
        std::string ignored;
        RL_RETURN_IF_ERROR(ReadMeta(size, "pax global header", header_at, &ignored));
        continue;
      }
      default:
        break;
    }
    have_long_name = have_pax_path = have_pax_size = false;
    const bool regular = TarHeader{type, size, name}.regular();
    if (type >= '1' && type <= '6') size = 0;  // links, devices, directories, FIFOs: no data follows
    if (type == '\0' && !regular) size = 0;    // old-style directory
    data_left_ = size;
    padding_ = Padding(size);
    if (regular) {
      in_member_ = true;
      current_ = name;
      current_at_ = header_at;
      member->name = std::move(name);
      member->offset = pos_;
      member->size = size;
      return true;
    }
    // Anything else (GNU sparse, volume labels, unknown types): skip its data.
    const std::string saved = current_;
    const uint64_t saved_at = current_at_;
    current_ = name;
    current_at_ = header_at;
    absl::Status skipped = SkipRest();
    current_ = saved;
    current_at_ = saved_at;
    RL_RETURN_IF_ERROR(skipped);
    if (done_) return false;
  }
}

absl::Status TarReader::ReadData(uint64_t limit, std::string* out) {
  if (data_left_ > limit) {
    const uint64_t size = data_left_;
    RL_RETURN_IF_ERROR(SkipRest());
    return absl::OutOfRangeError(absl::StrCat("member '", current_, "' is ", size, " bytes, over the limit of ",
                                              limit));
  }
  out->resize(static_cast<size_t>(data_left_));
  RL_ASSIGN_OR_RETURN(size_t got, ReadFully(reinterpret_cast<uint8_t*>(out->data()), out->size()));
  if (got < out->size()) {
    const uint64_t size = data_left_;
    data_left_ = 0;
    padding_ = 0;
    done_ = true;
    out->clear();
    last_truncated_ = true;
    return absl::DataLossError(absl::StrCat("truncated: member '", current_, "' (header at offset ", current_at_,
                                            ") needs ", size - got, " more bytes; the archive ends at offset ", pos_));
  }
  data_left_ = 0;
  in_member_ = false;
  return absl::OkStatus();
}

}  // namespace ringloader

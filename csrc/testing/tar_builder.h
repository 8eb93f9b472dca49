#pragma once
/// Hand-built tar archives for the tests: every header written field by field, so the tests
/// control exactly what the parser sees (GNU long names, pax headers, base-256 sizes, bad
/// checksums, truncation anywhere).

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace ringloader::testing {

class TarBuilder {
 public:
  enum class Magic { kUstar, kGnu };

  /// Where the last Add* put things (archive offsets).
  struct Layout {
    uint64_t first_header = 0;  ///< First byte of the entry (its first extension header).
    uint64_t data = 0;          ///< First data byte.
    uint64_t size = 0;
  };

  /// A regular file. `prefix` (ustar only) goes to the prefix field.
  Layout AddFile(const std::string& name, const std::string& data, char type = '0',
                 Magic magic = Magic::kUstar, const std::string& prefix = "", bool base256_size = false) {
    Layout at;
    at.first_header = bytes_.size();
    Header(name, data.size(), type, magic, prefix, base256_size);
    at.data = bytes_.size();
    at.size = data.size();
    Data(data);
    return at;
  }
  /// A file whose name is given by a GNU `L` entry (the ustar name field is truncated).
  Layout AddGnuLongName(const std::string& name, const std::string& data) {
    const uint64_t first = bytes_.size();
    Header("././@LongLink", name.size() + 1, 'L', Magic::kGnu, "", false);
    Data(name + std::string(1, '\0'));
    Layout at = AddFile(name.substr(0, 99), data, '0', Magic::kGnu);
    at.first_header = first;
    return at;
  }
  /// A file whose path (and, with `pax_size`, size) comes from a pax `x` header.
  Layout AddPax(const std::string& path, const std::string& data, bool pax_size = false) {
    const uint64_t first = bytes_.size();
    std::string records = Record("path", path);
    if (pax_size) records += Record("size", std::to_string(data.size()));
    records += Record("mtime", "1700000000.5");
    Header("PaxHeaders/x", records.size(), 'x', Magic::kUstar, "", false);
    Data(records);
    Layout at;
    at.first_header = first;
    Header("short-name-ignored", pax_size ? 0 : data.size(), '0', Magic::kUstar, "", false);
    at.data = bytes_.size();
    at.size = data.size();
    Data(data);
    return at;
  }
  /// A global pax header (accepted, ignored).
  void AddGlobalPax() {
    const std::string records = Record("comment", "made by the tests");
    Header("pax_global_header", records.size(), 'g', Magic::kUstar, "", false);
    Data(records);
  }
  void AddDirectory(const std::string& name) { Header(name, 0, '5', Magic::kUstar, "", false); }
  void AddSymlink(const std::string& name) { Header(name, 0, '2', Magic::kUstar, "", false); }
  /// Two zero blocks.
  void End() { bytes_.resize(bytes_.size() + 1024, 0); }

  std::string& bytes() { return bytes_; }
  void Write(const std::string& path) const {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) std::abort();
    std::fwrite(bytes_.data(), 1, bytes_.size(), f);
    std::fclose(f);
  }

  /// Recomputes the checksum of the header at `offset` (after a test edited it).
  void FixChecksum(uint64_t offset) {
    char* h = &bytes_[offset];
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(h[i]);
    std::snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
  }

 private:
  static std::string Record(const std::string& key, const std::string& value) {
    const std::string body = " " + key + "=" + value + "\n";
    size_t len = body.size() + 1;
    while (std::to_string(len).size() + body.size() != len) ++len;
    return std::to_string(len) + body;
  }
  void Header(const std::string& name, uint64_t size, char type, Magic magic, const std::string& prefix,
              bool base256_size) {
    const uint64_t at = bytes_.size();
    bytes_.resize(at + 512, '\0');
    char* h = &bytes_[at];
    std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 1000);
    std::snprintf(h + 116, 8, "%07o", 1000);
    if (base256_size) {
      h[124] = static_cast<char>(0x80);
      for (int i = 0; i < 8; ++i) h[124 + 11 - i] = static_cast<char>((size >> (8 * i)) & 0xFF);
    } else {
      char field[13];
      std::snprintf(field, sizeof(field), "%011llo", static_cast<unsigned long long>(size));
      std::memcpy(h + 124, field, 12);
    }
    std::snprintf(h + 136, 12, "%011o", 1700000000);
    h[156] = type;
    if (magic == Magic::kUstar) {
      std::memcpy(h + 257, "ustar\0" "00", 8);
      std::memcpy(h + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
    } else {
      std::memcpy(h + 257, "ustar  \0", 8);
    }
    FixChecksum(at);
  }
  void Data(const std::string& data) {
    bytes_ += data;
    bytes_.resize(bytes_.size() + (512 - data.size() % 512) % 512, '\0');
  }

  std::string bytes_;
};

}  // namespace ringloader::testing

#include "dataset/tar.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "testing/jpeg_fixtures.h"
#include "testing/tar_builder.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::TarBuilder;

// A ByteSource over a string, handing out at most `step` bytes per Read (a stream: Skip reads).
class StringSource final : public ByteSource {
 public:
  StringSource(std::string data, size_t step) : data_(std::move(data)), step_(step) {}
  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) override {
    const size_t take = std::min({n, step_, data_.size() - pos_});
    std::memcpy(dst, data_.data() + pos_, take);
    pos_ += take;
    return take;
  }

 private:
  std::string data_;
  size_t step_;
  size_t pos_ = 0;
};

struct Scan {
  std::vector<TarMember> members;
  std::vector<std::string> data;
  absl::Status error;
};

// Walks an archive, reading every member's data (`read_data`) or letting Next skip it.
Scan Walk(ByteSource* source, bool read_data) {
  Scan scan;
  TarReader reader(source);
  TarMember m;
  while (true) {
    absl::StatusOr<bool> next = reader.Next(&m);
    if (!next.ok()) {
      scan.error = next.status();
      if (reader.last_member_truncated()) {
        scan.members.pop_back();
        scan.data.pop_back();
      }
      break;
    }
    if (!*next) break;
    scan.members.push_back(m);
    std::string data;
    if (read_data) {
      absl::Status read = reader.ReadData(uint64_t{1} << 30, &data);
      if (!read.ok()) {
        scan.error = read;
        EXPECT_TRUE(reader.last_member_truncated());
        scan.members.pop_back();
        break;
      }
    }
    scan.data.push_back(data);
  }
  return scan;
}

std::string Slice(const std::string& archive, const TarMember& m) { return archive.substr(m.offset, m.size); }

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string ReadFileBytes(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

TEST(TarNumberTest, OctalAndBase256) {
  auto parse = [](const std::string& field) {
    return ParseTarNumber(reinterpret_cast<const uint8_t*>(field.data()), field.size());
  };
  EXPECT_EQ(*parse(std::string("00000001750\0", 12)), 1000);
  EXPECT_EQ(*parse(std::string("  1750 \0", 8)), 1000);
  EXPECT_EQ(*parse(std::string(12, '\0')), 0);
  EXPECT_FALSE(parse("0000017x0\0").ok());
  std::string b256(12, '\0');
  b256[0] = static_cast<char>(0x80);
  b256[7] = 0x02;  // 2 << 32
  EXPECT_EQ(*parse(b256), int64_t{2} << 32);
  std::string negative(12, static_cast<char>(0xFF));
  EXPECT_EQ(*parse(negative), -1);
  std::string huge(12, '\0');
  huge[0] = static_cast<char>(0x80);
  huge[2] = 0x01;  // 2^72
  EXPECT_FALSE(parse(huge).ok());
}

// Archives written by GNU tar in each format: every member found, with the right data range.
TEST(TarReaderTest, ReadsGnuTarArchivesInEveryFormat) {
  if (std::system("tar --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "GNU tar is not installed";
  const std::string dir = MakeTempDir();
  const std::string src = dir + "/src";
  std::map<std::string, std::string> files;
  const std::string deep = std::string(60, 'd') + "/" + std::string(60, 'e');  // > 100 chars with the file name
  files["000001.jpg"] = RandomBytes(1000, 1);
  files["000001.cls"] = "3\n";
  files["empty.bin"] = "";
  files["exact.bin"] = RandomBytes(512, 2);
  files[deep + "/000002.jpg"] = RandomBytes(70000, 3);
  std::string list;
  for (const auto& [name, data] : files) {
    testing::WriteFile(src + "/" + name, std::vector<uint8_t>(data.begin(), data.end()));
    list += " '" + name + "'";
  }
  ASSERT_EQ(std::system(("ln -s 000001.jpg '" + src + "/link.jpg'").c_str()), 0);
  list += " link.jpg " + std::string(60, 'd');  // a symlink and a directory (its files come again)
  for (const std::string format : {"gnu", "ustar", "pax", "posix"}) {
    const std::string archive = dir + "/" + format + ".tar";
    const std::string cmd = "tar --format=" + format + " --no-recursion -cf '" + archive + "' -C '" + src + "'" + list;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const std::string bytes = ReadFileBytes(archive);
    for (bool read_data : {false, true}) {
      auto source = FileByteSource::Open(archive, 4096);
      ASSERT_TRUE(source.ok()) << source.status();
      Scan scan = Walk(source->get(), read_data);
      EXPECT_TRUE(scan.error.ok()) << format << ": " << scan.error;
      std::map<std::string, std::string> got;
      for (size_t i = 0; i < scan.members.size(); ++i) {
        got[scan.members[i].name] = Slice(bytes, scan.members[i]);
        if (read_data) EXPECT_EQ(scan.data[i], got[scan.members[i].name]);
      }
      EXPECT_EQ(got, files) << format;
    }
  }
}

// The hand-built archive every truncation case is cut from.
struct Fixture {
  TarBuilder tar;
  std::vector<TarBuilder::Layout> layout;
  std::vector<std::string> names, data;
};

Fixture MakeFixture() {
  Fixture f;
  auto add = [&](const std::string& name, const std::string& data, TarBuilder::Layout at) {
    f.names.push_back(name);
    f.data.push_back(data);
    f.layout.push_back(at);
  };
  f.tar.AddGlobalPax();
  std::string d = RandomBytes(700, 10);
  add("plain/000001.jpg", d, f.tar.AddFile("000001.jpg", d, '0', TarBuilder::Magic::kUstar, "plain"));
  f.tar.AddDirectory("plain/");
  const std::string long_name = std::string(150, 'x') + "/000002.png";
  d = RandomBytes(1024, 11);
  add(long_name, d, f.tar.AddGnuLongName(long_name, d));
  f.tar.AddSymlink("link.jpg");
  const std::string pax_name = std::string(130, 'p') + "/000003.webp";
  d = RandomBytes(33, 12);
  add(pax_name, d, f.tar.AddPax(pax_name, d, /*pax_size=*/true));
  d = RandomBytes(5000, 13);
  add("big256.jpg", d, f.tar.AddFile("big256.jpg", d, '0', TarBuilder::Magic::kGnu, "", /*base256_size=*/true));
  add("empty.cls", "", f.tar.AddFile("empty.cls", ""));
  d = "7";
  add("old.cls", d, f.tar.AddFile("old.cls", d, '\0'));
  f.tar.End();
  return f;
}

TEST(TarReaderTest, LongNamesPaxBase256AndSkippedEntries) {
  Fixture f = MakeFixture();
  for (size_t step : {size_t{1}, size_t{7}, size_t{512}, size_t{1} << 20}) {
    for (bool read_data : {false, true}) {
      StringSource source(f.tar.bytes(), step);
      Scan scan = Walk(&source, read_data);
      EXPECT_TRUE(scan.error.ok()) << scan.error;
      ASSERT_EQ(scan.members.size(), f.names.size());
      for (size_t i = 0; i < f.names.size(); ++i) {
        EXPECT_EQ(scan.members[i].name, f.names[i]);
        EXPECT_EQ(scan.members[i].offset, f.layout[i].data) << f.names[i];
        EXPECT_EQ(Slice(f.tar.bytes(), scan.members[i]), f.data[i]);
        if (read_data) EXPECT_EQ(scan.data[i], f.data[i]);
      }
    }
  }
}

// Cutting the archive anywhere keeps exactly the members whose data is whole, and reports an
// error exactly when the cut falls inside a header (chain) or inside a member's data.
TEST(TarReaderTest, TruncationAtEveryBoundary) {
  Fixture f = MakeFixture();
  const std::string& full = f.tar.bytes();
  const uint64_t end_of_members = full.size() - 1024;
  std::vector<uint64_t> cuts;
  for (uint64_t p = 0; p <= full.size(); ++p) {
    // Every byte near a block boundary and every 37th byte elsewhere (the rest behave alike).
    if (p % 512 <= 2 || p % 512 >= 510 || p % 37 == 0) cuts.push_back(p);
  }
  for (const TarBuilder::Layout& at : f.layout) {
    for (int64_t d : {-1, 0, 1}) {
      cuts.push_back(at.data + d);
      cuts.push_back(at.data + at.size + d);
    }
  }
  for (uint64_t p : cuts) {
    if (p > full.size()) continue;
    size_t whole = 0;
    bool inside = false;
    for (size_t i = 0; i < f.layout.size(); ++i) {
      const TarBuilder::Layout& at = f.layout[i];
      if (at.data + at.size <= p) whole = i + 1;
      if (p > at.first_header && p < at.data + at.size) inside = true;
    }
    // Inside the global pax header's block, or before its data (a cut in that data's padding
    // leaves no member behind and reads as a short, complete archive).
    if (p > 0 && p <= 512) inside = true;
    for (bool read_data : {false, true}) {
      StringSource source(full.substr(0, p), 4096);
      Scan scan = Walk(&source, read_data);
      ASSERT_EQ(scan.members.size(), whole) << "cut at " << p;
      for (size_t i = 0; i < whole; ++i) EXPECT_EQ(scan.members[i].name, f.names[i]);
      if (p >= end_of_members) {
        EXPECT_TRUE(scan.error.ok()) << "cut at " << p << " (in the end blocks): " << scan.error;
      } else if (inside) {
        ASSERT_FALSE(scan.error.ok()) << "cut at " << p;
        EXPECT_TRUE(absl::IsDataLoss(scan.error)) << scan.error;
        EXPECT_NE(scan.error.message().find("truncated"), std::string::npos) << scan.error;
        EXPECT_NE(scan.error.message().find("offset"), std::string::npos) << scan.error;
      }
    }
  }
  // One case spelled out: the cut inside the data of the base-256 member names it.
  StringSource source(full.substr(0, f.layout[3].data + 100), 4096);
  Scan scan = Walk(&source, false);
  EXPECT_EQ(scan.members.size(), 3u);
  EXPECT_EQ(scan.error.message(),
            absl::StrCat("truncated: member 'big256.jpg' (header at offset ", f.layout[3].first_header,
                         ") needs 4900 more bytes; the archive ends at offset ", f.layout[3].data + 100));
}

TEST(TarReaderTest, BadChecksumStopsAfterTheMembersBeforeIt) {
  Fixture f = MakeFixture();
  std::string bytes = f.tar.bytes();
  bytes[f.layout[3].first_header + 10] ^= 0x20;  // a name byte of the base-256 member's header
  StringSource source(bytes, 1 << 20);
  Scan scan = Walk(&source, false);
  EXPECT_EQ(scan.members.size(), 3u);
  ASSERT_TRUE(absl::IsDataLoss(scan.error)) << scan.error;
  EXPECT_NE(scan.error.message().find(absl::StrCat("bad header checksum at offset ", f.layout[3].first_header)),
            std::string::npos)
      << scan.error;
  EXPECT_NE(scan.error.message().find(f.names[2]), std::string::npos) << "names the member before";
}

TEST(TarReaderTest, GarbageAndEmptyInputs) {
  {
    StringSource source("", 512);
    Scan scan = Walk(&source, false);
    EXPECT_TRUE(scan.error.ok());
    EXPECT_TRUE(scan.members.empty());
  }
  {
    StringSource source(RandomBytes(2048, 5), 512);
    Scan scan = Walk(&source, false);
    EXPECT_TRUE(absl::IsDataLoss(scan.error)) << scan.error;
    EXPECT_NE(scan.error.message().find("first header"), std::string::npos) << scan.error;
  }
  {
    // A pax header with a lying record length.
    TarBuilder tar;
    tar.AddPax("a.jpg", "x");
    std::string bytes = tar.bytes();
    bytes[512] = '9';  // "NN path=..." -> a length past the record
    bytes[513] = '9';
    StringSource source(bytes, 512);
    Scan scan = Walk(&source, false);
    EXPECT_TRUE(absl::IsDataLoss(scan.error)) << scan.error;
    EXPECT_NE(scan.error.message().find("bad pax header"), std::string::npos) << scan.error;
  }
  auto missing = FileByteSource::Open("/nonexistent/shard.tar");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_NE(missing.status().message().find("/nonexistent/shard.tar"), std::string::npos);
  auto directory = FileByteSource::Open(MakeTempDir());
  EXPECT_TRUE(absl::IsInvalidArgument(directory.status())) << directory.status();
}

TEST(TarReaderTest, ReadDataRefusesMembersOverTheLimitAndSkipsThem) {
  TarBuilder tar;
  tar.AddFile("a.cls", std::string(3000, '1'));
  tar.AddFile("b.cls", "2");
  tar.End();
  StringSource source(tar.bytes(), 100);
  TarReader reader(&source);
  TarMember m;
  ASSERT_TRUE(*reader.Next(&m));
  std::string data;
  EXPECT_TRUE(absl::IsOutOfRange(reader.ReadData(1000, &data)));
  ASSERT_TRUE(*reader.Next(&m));
  EXPECT_EQ(m.name, "b.cls");
  ASSERT_TRUE(reader.ReadData(1000, &data).ok());
  EXPECT_EQ(data, "2");
  EXPECT_FALSE(*reader.Next(&m));
}

}  // namespace
}  // namespace ringloader

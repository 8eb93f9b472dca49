#include "dataset/webdataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "testing/jpeg_fixtures.h"
#include "testing/tar_builder.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::TarBuilder;

std::string Keys(const ShardIndex& index) {
  std::string out;
  for (const ShardSample& s : index.samples) absl::StrAppend(&out, out.empty() ? "" : " ", s.key);
  return out;
}

TEST(WebDatasetTest, SplitsNamesLikeTheWebdatasetPackage) {
  std::string key, ext;
  ASSERT_TRUE(SplitMemberName("dir/abc.seg.png", &key, &ext));
  EXPECT_EQ(key, "dir/abc");
  EXPECT_EQ(ext, "seg.png");
  ASSERT_TRUE(SplitMemberName("a.b/c.JPG", &key, &ext));  // dots in folders do not count
  EXPECT_EQ(key, "a.b/c");
  EXPECT_EQ(ext, "jpg");
  ASSERT_TRUE(SplitMemberName("000001.jpg", &key, &ext));
  EXPECT_EQ(key, "000001");
  EXPECT_FALSE(SplitMemberName("dir/.hidden.jpg", &key, &ext));
  EXPECT_FALSE(SplitMemberName(".jpg", &key, &ext));
  EXPECT_FALSE(SplitMemberName("dir/noextension", &key, &ext));
  EXPECT_FALSE(SplitMemberName("dir/", &key, &ext));
  EXPECT_FALSE(SplitMemberName("__info__", &key, &ext));
  ASSERT_TRUE(SplitMemberName("x/__k__.jpg", &key, &ext));
}

TEST(WebDatasetTest, DecimalLabels) {
  EXPECT_EQ(*ParseDecimalLabel("3"), 3);
  EXPECT_EQ(*ParseDecimalLabel(" \t42\r\n"), 42);
  EXPECT_EQ(*ParseDecimalLabel("-7"), -7);
  EXPECT_EQ(*ParseDecimalLabel("+7"), 7);
  EXPECT_EQ(*ParseDecimalLabel("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(*ParseDecimalLabel("-9223372036854775808"), INT64_MIN);
  EXPECT_FALSE(ParseDecimalLabel("9223372036854775808").ok());
  EXPECT_FALSE(ParseDecimalLabel("").ok());
  EXPECT_FALSE(ParseDecimalLabel("-").ok());
  EXPECT_FALSE(ParseDecimalLabel("1.5").ok());
  EXPECT_FALSE(ParseDecimalLabel("1 2").ok());
  EXPECT_EQ(ParseDecimalLabel("abc").status().message(), "label 'abc' is not an integer");
}

TEST(WebDatasetTest, JsonScannerFindsTopLevelIntegerField) {
  EXPECT_EQ(*JsonIntegerField(R"({"label": 5})", "label"), 5);
  EXPECT_EQ(*JsonIntegerField(R"( {"a": {"label": 1, "b": [1, {"label": 2}]}, "label" : -12 } )", "label"), -12);
  // Strings with escapes, including quotes and braces, are skipped whole.
  EXPECT_EQ(*JsonIntegerField(R"({"caption": "a \"quoted\" {label: 9} \\", "label": 3})", "label"), 3);
  EXPECT_EQ(*JsonIntegerField(R"({"lab\u0065l": 8})", "label"), 8);  // escaped key
  EXPECT_EQ(*JsonIntegerField(R"({"x": "\ud83d\ude00", "label": 4, "y": [true, false, null, 1.5e3]})", "label"), 4);
  EXPECT_EQ(*JsonIntegerField(R"({"label": 1, "label": 2})", "label"), 2) << "the last wins, as json.loads";
  EXPECT_EQ(*JsonIntegerField(R"({"cls": 6})", "cls"), 6);
  EXPECT_TRUE(absl::IsNotFound(JsonIntegerField(R"({"other": 1})", "label").status()));
  EXPECT_TRUE(absl::IsNotFound(JsonIntegerField(R"({})", "label").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntegerField(R"({"label": 1.5})", "label").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntegerField(R"({"label": "1"})", "label").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntegerField(R"({"label": 1e2})", "label").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntegerField(R"([1, 2])", "label").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntegerField(R"({"label": 1)", "label").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntegerField(R"({"a": "unterminated)", "label").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntegerField(R"({"label": 1} x)", "label").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JsonIntegerField(std::string(1000, '['), "label").status()));
}

TEST(WebDatasetTest, GroupsConsecutiveMembersAndPicksImageAndLabel) {
  const std::string dir = MakeTempDir();
  TarBuilder tar;
  const auto a_jpg = tar.AddFile("d/a.jpg", "JPEGDATA");
  tar.AddFile("d/a.cls", " 3\n");
  tar.AddFile("d/a.json", R"({"label": 99})");
  tar.AddFile("d/b.PNG", "PNGDATA");        // upper-case extension
  const auto b_jpeg = tar.AddFile("d/b.jpeg", "JPEG2");  // jpeg before png in image_exts order
  tar.AddFile("d/b.cls", "4");
  tar.AddFile("d/.hidden.jpg", "x");        // ignored
  tar.AddFile("d/README", "x");             // ignored
  tar.AddFile("d/c.seg.png", "SEG");        // extension seg.png: not an image
  tar.AddFile("d/c.cls", "5");
  tar.AddFile("d/e.jpg", "E");
  tar.AddFile("d/e.cls", "abc");
  tar.AddFile("d/f.webp", "F");
  tar.AddFile("d/g.jpg", "G");
  tar.AddFile("d/g.cls", "1");
  tar.AddFile("d/a.cls", "6");              // key a again, not consecutive: a new sample
  tar.AddFile("d/a.jpg", "A2");
  tar.AddFile("d/h.jpg", "H");
  tar.AddFile("d/h.cls", std::string(70000, '1'));
  tar.End();
  tar.Write(dir + "/shard.tar");
  const std::string url = dir + "/shard.tar";
  auto index = ScanWebDatasetShard(url, WebDatasetOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->error, "");
  EXPECT_EQ(index->bytes, tar.bytes().size());
  EXPECT_EQ(Keys(*index), "d/a d/b d/c d/e d/f d/g d/a d/h");
  const auto& s = index->samples;
  EXPECT_EQ(s[0].member, "d/a.jpg");
  EXPECT_EQ(s[0].offset, a_jpg.data);
  EXPECT_EQ(s[0].length, 8);
  EXPECT_EQ(s[0].label, 3);
  EXPECT_EQ(s[0].error, "");
  EXPECT_EQ(s[1].member, "d/b.jpeg");
  EXPECT_EQ(s[1].offset, b_jpeg.data);
  EXPECT_EQ(s[1].label, 4);
  EXPECT_EQ(s[2].error, url + ": sample 'd/c' has no image member (.jpg/.jpeg/.png/.webp)");
  EXPECT_EQ(s[3].error, url + ": member 'd/e.cls': label 'abc' is not an integer");
  EXPECT_EQ(s[3].member, "d/e.jpg") << "a bad label keeps the image's range";
  EXPECT_EQ(s[4].error, url + ": sample 'd/f' has no .cls member");
  EXPECT_EQ(s[5].label, 1);
  EXPECT_EQ(s[6].label, 6);
  EXPECT_EQ(s[6].member, "d/a.jpg");
  EXPECT_EQ(s[7].error, url + ": member 'd/h.cls' is 70000 bytes, over the 64 KiB limit for a label");
  for (const ShardSample& sample : s) {
    if (!sample.error.empty()) EXPECT_EQ(sample.label, -1) << sample.key;
  }

  // JSON labels, another image preference, no labels at all.
  WebDatasetOptions json;
  json.label_key = "json";
  index = ScanWebDatasetShard(url, json);
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index->samples[0].label, 99);
  EXPECT_EQ(index->samples[1].error, url + ": sample 'd/b' has no .json member");
  WebDatasetOptions png_first;
  png_first.image_exts = {"PNG", "jpeg"};
  png_first.label_key = "";
  index = ScanWebDatasetShard(url, png_first);
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index->samples[1].member, "d/b.PNG");
  EXPECT_EQ(index->samples[1].label, -1);
  EXPECT_EQ(index->samples[1].error, "");
  EXPECT_EQ(index->samples[0].error, url + ": sample 'd/a' has no image member (.png/.jpeg)");
}

// Video members are not images: a sample of one says what reads it, and so does image_exts
// naming a video extension.
TEST(WebDatasetTest, VideoMembersSayWhatReadsThem) {
  const std::string dir = MakeTempDir();
  TarBuilder tar;
  tar.AddFile("clip0.mp4", std::string(500, 'v'));
  tar.AddFile("clip0.cls", "0");
  tar.AddFile("clip1.jpg", "J");
  tar.AddFile("clip1.webm", "W");
  tar.AddFile("clip1.cls", "1");
  tar.End();
  tar.Write(dir + "/videos.tar");
  const std::string url = dir + "/videos.tar";
  auto index = ScanWebDatasetShard(url, WebDatasetOptions());
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->samples.size(), 2u);
  EXPECT_NE(index->samples[0].error.find("sample 'clip0' has no image member (.jpg/.jpeg/.png/.webp); its member "
                                         "'clip0.mp4' is a video"),
            std::string::npos)
      << index->samples[0].error;
  EXPECT_NE(index->samples[0].error.find("read shards of videos with rl.VideoShards"), std::string::npos);
  EXPECT_EQ(index->samples[1].error, "");  // an image beside a video: the image is the sample's
  EXPECT_EQ(index->samples[1].member, "clip1.jpg");
  WebDatasetOptions videos;
  videos.image_exts = {"MKV"};
  auto refused = ScanWebDatasetShard(url, videos);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("image_exts: 'MKV' is a video extension"), std::string::npos)
      << refused.status();
  videos.video_members = true;  // rl.VideoShards' index: the video is the sample's member
  index = ScanWebDatasetShard(url, videos);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->samples[0].error, url + ": sample 'clip0' has no video member (.mkv)");
  videos.image_exts = {"mp4", "webm"};
  index = ScanWebDatasetShard(url, videos);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->samples[0].member, "clip0.mp4");
  EXPECT_EQ(index->samples[0].length, 500);
  EXPECT_EQ(index->samples[1].member, "clip1.webm");
  EXPECT_EQ(index->samples[1].label, 1);
}

TEST(WebDatasetTest, TruncatedShardKeepsTheSamplesBeforeTheCut) {
  const std::string dir = MakeTempDir();
  TarBuilder tar;
  tar.AddFile("000.jpg", std::string(600, 'a'));
  tar.AddFile("000.cls", "0");
  const auto cut_image = tar.AddFile("001.jpg", std::string(3000, 'b'));
  tar.AddFile("001.cls", "1");
  tar.End();
  std::string bytes = tar.bytes().substr(0, cut_image.data + 1000);
  tar.bytes() = bytes;
  tar.Write(dir + "/cut.tar");
  for (const std::string url : {dir + "/cut.tar", "pipe:cat '" + dir + "/cut.tar'"}) {
    const SourceKind source = absl::StartsWith(url, "pipe:") ? SourceKind::kPipe : SourceKind::kFile;
    auto index = ScanWebDatasetShard(url, WebDatasetOptions(), source);
    ASSERT_TRUE(index.ok()) << index.status();
    ASSERT_EQ(index->samples.size(), 2u) << url;
    EXPECT_EQ(index->samples[0].error, "");
    EXPECT_EQ(index->samples[0].label, 0);
    // The cut image is dropped: its group has no image left.
    EXPECT_NE(index->samples[1].error.find("has no image member"), std::string::npos) << index->samples[1].error;
    EXPECT_EQ(index->error, absl::StrCat(url, ": truncated: member '001.jpg' (header at offset ", cut_image.first_header,
                                         ") needs 2000 more bytes; the archive ends at offset ", bytes.size()));
    EXPECT_EQ(index->bytes, bytes.size());
  }
}

TEST(WebDatasetTest, PipeUrlsAndShardErrors) {
  const std::string dir = MakeTempDir();
  TarBuilder tar;
  tar.AddFile("k1.jpg", "one");
  tar.AddFile("k1.cls", "1");
  tar.AddFile("k2.jpg", "two");
  tar.AddFile("k2.cls", "2");
  tar.End();
  tar.bytes().resize(10240, '\0');  // tar's record padding after the end blocks
  tar.Write(dir + "/s.tar");
  auto local = ScanWebDatasetShard(dir + "/s.tar", WebDatasetOptions());
  auto piped = ScanWebDatasetShard("pipe:cat " + dir + "/s.tar", WebDatasetOptions(), SourceKind::kPipe);
  ASSERT_TRUE(local.ok() && piped.ok());
  EXPECT_EQ(piped->error, "");
  EXPECT_EQ(piped->bytes, 10240u);
  ASSERT_EQ(piped->samples.size(), local->samples.size());
  for (size_t i = 0; i < local->samples.size(); ++i) {
    EXPECT_EQ(piped->samples[i].offset, local->samples[i].offset);
    EXPECT_EQ(piped->samples[i].length, local->samples[i].length);
    EXPECT_EQ(piped->samples[i].label, local->samples[i].label);
  }
  // A failing command: its status is the shard's error, the samples it wrote are kept.
  auto failed = ScanWebDatasetShard("pipe:cat " + dir + "/s.tar; exit 3", WebDatasetOptions(), SourceKind::kPipe);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->samples.size(), 2u);
  EXPECT_EQ(failed->error, "pipe:cat " + dir + "/s.tar; exit 3 exited with status 3");
  auto nothing = ScanWebDatasetShard("pipe:false", WebDatasetOptions(), SourceKind::kPipe);
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->samples.empty());
  EXPECT_EQ(nothing->error, "pipe:false exited with status 1");

  auto missing = ScanWebDatasetShard(dir + "/missing.tar", WebDatasetOptions());
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_NE(missing.status().message().find(dir + "/missing.tar"), std::string::npos);
  WebDatasetOptions bad;
  bad.image_exts = {};
  EXPECT_TRUE(absl::IsInvalidArgument(ScanWebDatasetShard(dir + "/s.tar", bad).status()));
  bad.image_exts = {".jpg"};
  EXPECT_TRUE(absl::IsInvalidArgument(ScanWebDatasetShard(dir + "/s.tar", bad).status()));
  bad.image_exts = {"jpg"};
  bad.label_key = "jpg";
  EXPECT_TRUE(absl::IsInvalidArgument(ScanWebDatasetShard(dir + "/s.tar", bad).status()));
}

// A shard written by GNU tar from files named like a webdataset.
TEST(WebDatasetTest, AShardNamedLikeAPipeIsReadAsAFile) {
  const std::string dir = MakeTempDir();
  TarBuilder tar;
  tar.AddFile("k1.jpg", "one");
  tar.AddFile("k1.cls", "1");
  tar.End();
  const std::string name = "pipe:touch PWNED; cat s.tar; true .tar";
  tar.Write(dir + "/" + name);
  char previous[4096];
  ASSERT_NE(getcwd(previous, sizeof(previous)), nullptr);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  auto index = ScanWebDatasetShard(name, WebDatasetOptions());
  auto absent = ScanWebDatasetShard("pipe:touch PWNED", WebDatasetOptions());
  auto unmarked = ScanWebDatasetShard("s.tar", WebDatasetOptions(), SourceKind::kPipe);
  const bool pwned = access("PWNED", F_OK) == 0;
  ASSERT_EQ(chdir(previous), 0);
  EXPECT_FALSE(pwned) << "a shard's name was run as a command";
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(Keys(*index), "k1");
  EXPECT_EQ(index->error, "");
  EXPECT_TRUE(absl::IsNotFound(absent.status())) << absent.status();
  EXPECT_TRUE(absl::IsInvalidArgument(unmarked.status())) << unmarked.status();
}

TEST(WebDatasetTest, ScansAShardWrittenByGnuTar) {
  if (std::system("tar --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "GNU tar is not installed";
  const std::string dir = MakeTempDir();
  std::string list;
  for (int i = 0; i < 5; ++i) {
    const std::string key = absl::StrCat("train/", 1000 + i);
    testing::WriteFile(dir + "/src/" + key + ".jpg", std::vector<uint8_t>(100 + i * 700, static_cast<uint8_t>(i)));
    const std::string label = absl::StrCat(i * 2);
    testing::WriteFile(dir + "/src/" + key + ".cls", std::vector<uint8_t>(label.begin(), label.end()));
    absl::StrAppend(&list, " ", key, ".jpg ", key, ".cls");
  }
  for (const std::string format : {"gnu", "ustar", "pax"}) {
    const std::string shard = dir + "/" + format + ".tar";
    ASSERT_EQ(std::system(("tar --format=" + format + " -cf " + shard + " -C " + dir + "/src" + list).c_str()), 0);
    auto index = ScanWebDatasetShard(shard, WebDatasetOptions());
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(index->error, "");
    ASSERT_EQ(index->samples.size(), 5u);
    for (int i = 0; i < 5; ++i) {
      const ShardSample& s = index->samples[static_cast<size_t>(i)];
      EXPECT_EQ(s.key, absl::StrCat("train/", 1000 + i));
      EXPECT_EQ(s.label, i * 2);
      EXPECT_EQ(s.length, 100 + i * 700);
      EXPECT_EQ(s.error, "");
    }
  }
}

}  // namespace
}  // namespace ringloader

#include "decode/clean_scans.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ringloader::decode_internal {
namespace {

TEST(CleanScans, RemembersWhatWasAddedAndNothingElse) {
  CleanScans<64> memo;
  EXPECT_FALSE(memo.Contains(5));
  EXPECT_TRUE(memo.Add(5));
  EXPECT_TRUE(memo.Add(5));  // again: no second slot
  EXPECT_TRUE(memo.Contains(5));
  EXPECT_FALSE(memo.Contains(5 + 64));  // same first slot, never added
  EXPECT_TRUE(memo.Add(5 + 64));
  EXPECT_TRUE(memo.Contains(5 + 64));
  EXPECT_TRUE(memo.Contains(5));
}

TEST(CleanScans, AFullProbeRunForgetsInsteadOfEvicting) {
  CleanScans<8> memo;  // probe runs of 8: every slot
  for (uint64_t i = 1; i <= 8; ++i) ASSERT_TRUE(memo.Add(i * 8));  // all start at slot 0
  EXPECT_FALSE(memo.Add(9 * 8));
  EXPECT_FALSE(memo.Contains(9 * 8));
  for (uint64_t i = 1; i <= 8; ++i) EXPECT_TRUE(memo.Contains(i * 8));
}

TEST(CleanScans, ConcurrentAddsAreAllKept) {
  static CleanScans<4096> memo;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (uint64_t i = 1; i <= 500; ++i) memo.Add(i * 4 + t);
    });
  }
  for (std::thread& th : threads) th.join();
  for (uint64_t v = 4; v < 4 * 501; ++v) EXPECT_TRUE(memo.Contains(v)) << v;
}

TEST(CleanScans, FingerprintsFollowTheBytes) {
  const ScanHasher fingerprint(ScanKey{0x0123456789abcdefull, 0xfedcba9876543210ull});
  std::vector<uint8_t> a(1000, 7);
  const uint64_t fa = fingerprint(a.data(), a.size());
  EXPECT_NE(fa, 0u);
  EXPECT_EQ(fa, fingerprint(a.data(), a.size()));
  a[999] ^= 1;
  EXPECT_NE(fa, fingerprint(a.data(), a.size()));
  EXPECT_NE(fingerprint(a.data(), 999), fingerprint(a.data(), 1000));
  // A file-sized buffer: a one-bit change anywhere changes it (every byte is hashed, none
  // sampled).
  std::vector<uint8_t> big(64 << 10);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const uint64_t fb = fingerprint(big.data(), big.size());
  for (size_t i = 0; i < big.size(); i += 61) {
    big[i] ^= 0x10;
    EXPECT_NE(fingerprint(big.data(), big.size()), fb) << i;
    big[i] ^= 0x10;
  }
}

// The reference vectors of the SipHash paper (key 00..0f, messages 00, 01, .. of each length).
TEST(CleanScans, FingerprintsTellZeroPaddingAndKeysApart) {
  const ScanHasher fingerprint(ScanKey{1, 2});
  const std::vector<uint8_t> three = {1, 2, 3}, four = {1, 2, 3, 0};
  EXPECT_NE(fingerprint(three.data(), 3), fingerprint(four.data(), 4));
  std::vector<uint8_t> block(1024, 5);
  const uint64_t one_block = fingerprint(block.data(), block.size());
  block.resize(1024 + 8, 0);  // a last part block of zeros
  EXPECT_NE(fingerprint(block.data(), block.size()), one_block);
  EXPECT_NE(fingerprint(block.data(), 0), 0u);
  const ScanHasher other(ScanKey{1, 3});
  EXPECT_NE(other(block.data(), block.size()), fingerprint(block.data(), block.size()));
  EXPECT_NE(other(three.data(), 3), fingerprint(three.data(), 3));
}

TEST(CleanScans, SipHashMatchesTheReferenceVectors) {
  const ScanKey key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  std::vector<uint8_t> msg(15);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i);
  EXPECT_EQ((SipHash<2, 4>(key, msg.data(), 0)), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ((SipHash<2, 4>(key, msg.data(), 15)), 0xa129ca6149be45e5ull);
}

/// A fresh folder under the test's temporary directory, removed with what it holds.
class TempFolder {
 public:
  TempFolder() : path_(::testing::TempDir() + "clean_scans_XXXXXX") {
    EXPECT_NE(mkdtemp(path_.data()), nullptr);
  }
  ~TempFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(CleanScanFile, IsCreatedWithAKeyAndKeepsEntriesAcrossOpens) {
  const TempFolder folder;
  const std::string path = folder.path() + "/sub/memo.bin";  // folders made as needed
  const std::vector<uint8_t> bytes(5000, 42);
  uint64_t fingerprint = 0;
  {
    auto memo = CleanScanMemo::OpenFile(path, 1024);
    ASSERT_TRUE(memo.ok()) << memo.status();
    EXPECT_EQ((*memo)->table().slots(), 1024u);
    fingerprint = (*memo)->table().Fingerprint(bytes.data(), bytes.size());
    EXPECT_TRUE((*memo)->table().Add(fingerprint));
    EXPECT_EQ((*memo)->table().entries(), 1);
  }
  EXPECT_EQ(std::filesystem::file_size(path), 4096u + 1024u * 8u);
  // Only the owner may read it: the key is what keeps crafted collisions out.
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto again = CleanScanMemo::OpenFile(path, 1 << 16);  // an existing file keeps its size
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->table().slots(), 1024u);
  EXPECT_EQ((*again)->table().Fingerprint(bytes.data(), bytes.size()), fingerprint);
  EXPECT_TRUE((*again)->table().Contains(fingerprint));
  EXPECT_EQ((*again)->table().entries(), 1);
}

TEST(CleanScanFile, EachFileHasItsOwnKey) {
  const TempFolder temp;
  const std::string& folder = temp.path();
  auto a = CleanScanMemo::OpenFile(folder + "/a.bin", 64);
  auto b = CleanScanMemo::OpenFile(folder + "/b.bin", 64);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<uint8_t> bytes(300, 9);
  EXPECT_NE((*a)->table().Fingerprint(bytes.data(), bytes.size()),
            (*b)->table().Fingerprint(bytes.data(), bytes.size()));
  auto own = CleanScanMemo::InProcess(64);
  ASSERT_TRUE(own.ok());
  EXPECT_NE((*own)->table().Fingerprint(bytes.data(), bytes.size()),
            (*a)->table().Fingerprint(bytes.data(), bytes.size()));
}

TEST(CleanScanFile, AnotherProcessSeesWhatOneAdds) {
  const TempFolder folder;
  const std::string path = folder.path() + "/memo.bin";
  auto parent = CleanScanMemo::OpenFile(path, 1024);
  ASSERT_TRUE(parent.ok()) << parent.status();
  const std::vector<uint8_t> bytes(777, 3);
  const uint64_t fingerprint = (*parent)->table().Fingerprint(bytes.data(), bytes.size());
  ASSERT_FALSE((*parent)->table().Contains(fingerprint));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // a process with its own mapping of the file
    auto child = CleanScanMemo::OpenFile(path, 1024);
    const bool added =
        child.ok() && (*child)->table().Add((*child)->table().Fingerprint(bytes.data(), bytes.size()));
    _exit(added ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  EXPECT_TRUE((*parent)->table().Contains(fingerprint));  // through the parent's own mapping
  EXPECT_EQ((*parent)->table().entries(), 1);
}

// Processes that start together (DDP ranks) race to create the file: all end up on one.
TEST(CleanScanFile, ProcessesCreatingItTogetherShareOneFile) {
  const TempFolder folder;
  const std::string path = folder.path() + "/memo.bin";
  constexpr int kProcesses = 4;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto memo = CleanScanMemo::OpenFile(path, 1024);
      const std::vector<uint8_t> bytes(100 + p, static_cast<uint8_t>(p));
      _exit(memo.ok() && (*memo)->table().Add((*memo)->table().Fingerprint(bytes.data(), bytes.size()))
                ? 0
                : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  }
  auto memo = CleanScanMemo::OpenFile(path, 1024);
  ASSERT_TRUE(memo.ok()) << memo.status();
  EXPECT_EQ((*memo)->table().entries(), kProcesses);
  for (int p = 0; p < kProcesses; ++p) {
    const std::vector<uint8_t> bytes(100 + p, static_cast<uint8_t>(p));
    EXPECT_TRUE((*memo)->table().Contains((*memo)->table().Fingerprint(bytes.data(), bytes.size())))
        << p;
  }
  // No temporary file is left beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(folder.path()), {}), 1);
}

TEST(CleanScanFile, ABadFileFallsBackToTheProcessWithItsReason) {
  const TempFolder temp;
  const std::string& folder = temp.path();
  auto expect_fallback = [](const std::string& path, absl::string_view why) {
    const CleanScanChoice choice = ChooseCleanScanMemo(path, 64);
    EXPECT_EQ(choice.kind, "process") << path;
    ASSERT_NE(choice.memo, nullptr);
    EXPECT_TRUE(absl::StrContains(choice.note, path)) << choice.note;
    EXPECT_TRUE(absl::StrContains(choice.note, why)) << choice.note;
    EXPECT_TRUE(choice.memo->table().Add(7));  // and the fallback works
    EXPECT_TRUE(choice.memo->table().Contains(7));
  };
  const std::string garbage = folder + "/garbage.bin";
  std::ofstream(garbage) << std::string(5000, 'x');
  expect_fallback(garbage, "not a ringloader scan memo");
  const std::string empty = folder + "/empty.bin";
  std::ofstream(empty).flush();
  expect_fallback(empty, "not a ringloader scan memo");
  // A good file cut short (or grown): its size no longer matches its header.
  const std::string cut = folder + "/cut.bin";
  ASSERT_TRUE(CleanScanMemo::OpenFile(cut, 1024).ok());
  std::filesystem::resize_file(cut, 4096 + 100 * 8);
  expect_fallback(cut, "its header says 1024 slots");
  // A file of another libjpeg build: its verdicts are not this build's.
  const std::string other = folder + "/other.bin";
  ASSERT_TRUE(CleanScanMemo::OpenFile(other, 64).ok());
  {
    std::fstream f(other, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(24);  // FileHeader::libjpeg_version
    const uint64_t version = 1002003;
    f.write(reinterpret_cast<const char*>(&version), sizeof(version));
  }
  expect_fallback(other, "written for libjpeg-turbo 1.2.3");
  expect_fallback("/dev/null/memo.bin", "cannot");  // a folder that cannot exist
  expect_fallback(folder, "cannot open");  // a folder
}

TEST(CleanScanFile, SettingsOffAndProcess) {
  EXPECT_EQ(ChooseCleanScanMemo("off", 64).memo, nullptr);
  EXPECT_EQ(ChooseCleanScanMemo("off", 64).kind, "off");
  const CleanScanChoice own = ChooseCleanScanMemo("process", 64);
  EXPECT_EQ(own.kind, "process");
  EXPECT_EQ(own.note, "");
  ASSERT_NE(own.memo, nullptr);
  EXPECT_EQ(own.memo->path(), "");
}

/// Sets an environment variable for a scope (restores the previous value).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

TEST(CleanScanFile, TheDefaultFileIsInTheUsersCache) {
  const TempFolder temp;
  const std::string& folder = temp.path();
  {
    ScopedEnv xdg("XDG_CACHE_HOME", folder.c_str());
    auto path = DefaultCleanScanPath();
    ASSERT_TRUE(path.ok());
    EXPECT_TRUE(absl::StartsWith(*path, folder + "/ringloader/clean-scans-v1-")) << *path;
    EXPECT_TRUE(absl::EndsWith(*path, ".bin")) << *path;
    const CleanScanChoice choice = ChooseCleanScanMemo("", 64);
    EXPECT_EQ(choice.kind, "file") << choice.note;
    EXPECT_TRUE(std::filesystem::exists(*path));
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/cache");  // ignored, as the XDG spec says
    ScopedEnv home("HOME", folder.c_str());
    auto path = DefaultCleanScanPath();
    ASSERT_TRUE(path.ok());
    EXPECT_TRUE(absl::StartsWith(*path, folder + "/.cache/ringloader/")) << *path;
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", nullptr);
    EXPECT_FALSE(DefaultCleanScanPath().ok());
    const CleanScanChoice choice = ChooseCleanScanMemo("", 64);
    EXPECT_EQ(choice.kind, "process");
    EXPECT_TRUE(absl::StrContains(choice.note, "HOME")) << choice.note;
  }
}

}  // namespace
}  // namespace ringloader::decode_internal

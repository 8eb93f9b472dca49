#include "decode/clean_scans.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

// jpeglib.h needs size_t and FILE declared first (cstdio above).
#include <jpeglib.h>

#include "absl/strings/str_cat.h"

namespace ringloader::decode_internal {
namespace {

constexpr char kMagic[8] = {'R', 'L', 'S', 'C', 'A', 'N', 'S', '\0'};
constexpr uint32_t kFormatVersion = 1;
/// The header takes the first page; the slots follow, page-aligned.
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kMinSlots = 16;
constexpr size_t kMaxSlots = size_t{1} << 28;

#ifdef LIBJPEG_TURBO_VERSION_NUMBER
constexpr uint64_t kLibjpegVersion = LIBJPEG_TURBO_VERSION_NUMBER;  // e.g. 2001005 for 2.1.5
#else
constexpr uint64_t kLibjpegVersion = JPEG_LIB_VERSION;
#endif

/// The file's first bytes. `entries` is updated in place (atomically) as slots fill.
struct FileHeader {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;
  uint64_t slots;
  uint64_t libjpeg_version;  // the library whose verdicts the entries record
  uint64_t key[2];
  uint64_t entries;
};
static_assert(sizeof(FileHeader) <= kHeaderBytes);

uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

uint64_t LoadLittle64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

struct SipState {
  uint64_t v0, v1, v2, v3;
  void Round() {
    v0 += v1, v1 = Rotl(v1, 13), v1 ^= v0, v0 = Rotl(v0, 32);
    v2 += v3, v3 = Rotl(v3, 16), v3 ^= v2;
    v0 += v3, v3 = Rotl(v3, 21), v3 ^= v0;
    v2 += v1, v1 = Rotl(v1, 17), v1 ^= v2, v2 = Rotl(v2, 32);
  }
};

absl::Status FileError(const std::string& path, absl::string_view what, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat("scan memo ", path, ": ", what));
}

std::string VersionText(uint64_t n) {
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
  return absl::StrCat(n / 1000000, ".", n / 1000 % 1000, ".", n % 1000);
#else
  return absl::StrCat("libjpeg", n);
#endif
}

absl::Status RandomKey(ScanKey* key) {
  uint64_t k[2] = {0, 0};
  size_t got = 0;
  while (got < sizeof(k)) {
    const ssize_t n = getrandom(reinterpret_cast<char*>(k) + got, sizeof(k) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::ErrnoToStatus(n < 0 ? errno : EIO, "scan memo key: getrandom");
    got += static_cast<size_t>(n);
  }
  *key = ScanKey{k[0], k[1]};
  return absl::OkStatus();
}

bool ValidSlots(uint64_t slots) {
  return slots >= kMinSlots && slots <= kMaxSlots && (slots & (slots - 1)) == 0;
}

/// Writes a new memo file next to `path` and links it there unless one appeared meanwhile (a
/// racing process): every process ends up mapping the same file.
absl::Status CreateFile(const std::string& path, size_t slots) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return FileError(path, absl::StrCat("cannot create ", dir.string()), ec.value());
  }
  std::string temp = absl::StrCat(dir.empty() ? "." : dir.string(), "/.clean-scans-XXXXXX");
  const int fd = mkostemp(temp.data(), O_CLOEXEC);  // mode 0600: the key stays the user's
  if (fd < 0) return FileError(path, "cannot create a file in its folder", errno);
  FileHeader header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.format_version = kFormatVersion;
  header.header_bytes = kHeaderBytes;
  header.slots = slots;
  header.libjpeg_version = kLibjpegVersion;
  ScanKey key;
  absl::Status status = RandomKey(&key);
  header.key[0] = key.k0, header.key[1] = key.k1;
  const off_t bytes = static_cast<off_t>(kHeaderBytes + slots * sizeof(uint64_t));
  if (status.ok() && pwrite(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
    status = FileError(path, "cannot write the header", errno);
  }
  // Blocks are reserved up front: a store into a hole of a sparse mapping on a full disk would
  // raise SIGBUS in a decode thread instead of failing here.
  if (status.ok()) {
    const int err = posix_fallocate(fd, 0, bytes);
    if (err != 0) status = FileError(path, "cannot reserve its size", err);
  }
  if (status.ok() && fsync(fd) != 0) status = FileError(path, "cannot sync", errno);
  close(fd);
  // link(), unlike rename(), never replaces a file another process created meanwhile.
  if (status.ok() && link(temp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    status = FileError(path, "cannot create", errno);
  }
  unlink(temp.c_str());
  return status;
}

CleanScanInfo InfoOf(const CleanScanChoice& choice) {
  CleanScanInfo info;
  info.memo = choice.kind == "file" ? absl::StrCat("file ", choice.memo->path()) : choice.kind;
  info.note = choice.note;
  if (choice.memo) {
    info.entries = choice.memo->table().entries();
    info.slots = static_cast<int64_t>(choice.memo->table().slots());
  }
  return info;
}

// Chosen once and never freed: decode threads may use the table until the process exits.
std::atomic<CleanScanChoice*> process_choice{nullptr};

const CleanScanChoice& ProcessChoice() {
  CleanScanChoice* choice = process_choice.load(std::memory_order_acquire);
  if (choice != nullptr) return *choice;
  const char* setting = std::getenv("RINGLOADER_SCAN_MEMO");
  auto* mine = new CleanScanChoice(ChooseCleanScanMemo(setting == nullptr ? "" : setting));
  if (process_choice.compare_exchange_strong(choice, mine, std::memory_order_acq_rel)) return *mine;
  delete mine;  // another thread chose first
  return *choice;
}

}  // namespace

template <int kCompressionRounds, int kFinalRounds>
uint64_t SipHash(const ScanKey& key, const uint8_t* data, size_t size) {
  SipState s{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull,
             key.k0 ^ 0x6c7967656e657261ull, key.k1 ^ 0x7465646279746573ull};
  auto absorb = [&s](uint64_t m) {
    s.v3 ^= m;
    for (int r = 0; r < kCompressionRounds; ++r) s.Round();
    s.v0 ^= m;
  };
  const size_t whole = size & ~size_t{7};
  for (size_t i = 0; i < whole; i += 8) absorb(LoadLittle64(data + i));
  uint64_t last = static_cast<uint64_t>(size) << 56;
  for (size_t i = whole; i < size; ++i) last |= static_cast<uint64_t>(data[i]) << (8 * (i - whole));
  absorb(last);
  s.v2 ^= 0xff;
  for (int r = 0; r < kFinalRounds; ++r) s.Round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

template uint64_t SipHash<1, 3>(const ScanKey&, const uint8_t*, size_t);
template uint64_t SipHash<2, 4>(const ScanKey&, const uint8_t*, size_t);

namespace {

/// SipHash-1-3 over a sequence of 64-bit words (the caller makes the sequence unambiguous).
class SipWords {
 public:
  explicit SipWords(const ScanKey& key)
      : s_{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull,
           key.k0 ^ 0x6c7967656e657261ull, key.k1 ^ 0x7465646279746573ull} {}
  void Absorb(uint64_t m) {
    s_.v3 ^= m;
    s_.Round();
    s_.v0 ^= m;
  }
  uint64_t Finish() {
    s_.v2 ^= 0xff;
    s_.Round(), s_.Round(), s_.Round();
    return s_.v0 ^ s_.v1 ^ s_.v2 ^ s_.v3;
  }

 private:
  SipState s_;
};

/// NH over a block of kBlockWords 32-bit words (zero-padded), once with `key` and once with
/// `key + kShift`. Word i pairs with word i + kHalf rather than with its neighbour, so the
/// multiply-adds run on contiguous words (SIMD); any pairing of distinct words with distinct key
/// words keeps NH's bound.
void Nh(const uint32_t* w, const uint32_t* key, uint64_t* first, uint64_t* second) {
  constexpr size_t kHalf = ScanHasher::kBlockWords / 2;
  const uint32_t* shifted = key + ScanHasher::kShift;
  uint64_t a = 0, b = 0;
  for (size_t i = 0; i < kHalf; ++i) {
    a += static_cast<uint64_t>(w[i] + key[i]) * static_cast<uint32_t>(w[i + kHalf] + key[i + kHalf]);
  }
  for (size_t i = 0; i < kHalf; ++i) {
    b += static_cast<uint64_t>(w[i] + shifted[i]) *
         static_cast<uint32_t>(w[i + kHalf] + shifted[i + kHalf]);
  }
  *first = a;
  *second = b;
}

}  // namespace

ScanHasher::ScanHasher(const ScanKey& key) {
  // Both keys are SipHash-2-4 of a counter under `key`.
  auto derive = [&key](uint64_t counter) {
    uint8_t bytes[8];
    std::memcpy(bytes, &counter, sizeof(bytes));
    return SipHash<2, 4>(key, bytes, sizeof(bytes));
  };
  static_assert((kBlockWords + kShift) % 2 == 0);
  for (size_t i = 0; i < kBlockWords + kShift; i += 2) {
    const uint64_t v = derive(i);
    nh_key_[i] = static_cast<uint32_t>(v);
    nh_key_[i + 1] = static_cast<uint32_t>(v >> 32);
  }
  final_key_ = ScanKey{derive(uint64_t{1} << 32), derive((uint64_t{1} << 32) + 1)};
}

uint64_t ScanHasher::operator()(const uint8_t* data, size_t size) const {
  SipWords sip(final_key_);
  uint32_t block[kBlockWords];
  uint64_t a, b;
  size_t done = 0;
  for (; size - done >= sizeof(block); done += sizeof(block)) {
    std::memcpy(block, data + done, sizeof(block));
    Nh(block, nh_key_, &a, &b);
    sip.Absorb(a);
    sip.Absorb(b);
  }
  if (done < size) {  // the last part block, zero-padded (the length tells it apart)
    const size_t rest = size - done;
    std::memset(block, 0, sizeof(block));
    std::memcpy(block, data + done, rest);
    Nh(block, nh_key_, &a, &b);
    sip.Absorb(a);
    sip.Absorb(b);
  }
  sip.Absorb(static_cast<uint64_t>(size));
  const uint64_t h = sip.Finish();
  return h == 0 ? 1 : h;
}

CleanScanMemo::~CleanScanMemo() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

absl::StatusOr<std::unique_ptr<CleanScanMemo>> CleanScanMemo::OpenFile(const std::string& path,
                                                                      size_t slots_if_created) {
  if (!ValidSlots(slots_if_created)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scan memo ", path, ": ", slots_if_created, " slots: not a power of two in [",
                     kMinSlots, ", ", kMaxSlots, "]"));
  }
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    absl::Status created = CreateFile(path, slots_if_created);
    if (!created.ok()) return created;
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  }
  if (fd < 0) return FileError(path, "cannot open for reading and writing", errno);
  struct stat st;
  FileHeader header{};
  absl::Status status;
  if (fstat(fd, &st) != 0) {
    status = FileError(path, "cannot stat", errno);
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::FailedPreconditionError(absl::StrCat("scan memo ", path, ": not a regular file"));
  } else if (pread(fd, &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)) ||
             std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    status = absl::DataLossError(
        absl::StrCat("scan memo ", path, ": not a ringloader scan memo (header unreadable)"));
  } else if (header.format_version != kFormatVersion || header.header_bytes != kHeaderBytes) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "scan memo ", path, ": format version ", header.format_version, ", this build reads ",
        kFormatVersion));
  } else if (header.libjpeg_version != kLibjpegVersion) {
    status = absl::FailedPreconditionError(absl::StrCat(
        "scan memo ", path, ": written for libjpeg-turbo ", VersionText(header.libjpeg_version),
        ", this build decodes with ", VersionText(kLibjpegVersion)));
  } else if (!ValidSlots(header.slots) ||
             static_cast<uint64_t>(st.st_size) != kHeaderBytes + header.slots * sizeof(uint64_t)) {
    status = absl::DataLossError(absl::StrCat("scan memo ", path, ": ", st.st_size,
                                              " bytes, its header says ", header.slots, " slots"));
  } else if (header.key[0] == 0 && header.key[1] == 0) {
    status = absl::DataLossError(absl::StrCat("scan memo ", path, ": no key in its header"));
  }
  if (!status.ok()) {
    close(fd);
    return status;
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) return FileError(path, "cannot map", map_errno);
  std::unique_ptr<CleanScanMemo> memo(new CleanScanMemo);
  memo->base_ = base;
  memo->bytes_ = bytes;
  memo->path_ = path;
  auto* mapped = static_cast<uint8_t*>(base);
  memo->table_ = std::make_unique<CleanScanTable>(
      reinterpret_cast<uint64_t*>(mapped + kHeaderBytes), header.slots,
      reinterpret_cast<uint64_t*>(mapped + offsetof(FileHeader, entries)),
      ScanKey{header.key[0], header.key[1]});
  return memo;
}

absl::StatusOr<std::unique_ptr<CleanScanMemo>> CleanScanMemo::InProcess(size_t slots) {
  if (!ValidSlots(slots)) {
    return absl::InvalidArgumentError(absl::StrCat("scan memo: ", slots, " slots: not a power of two"));
  }
  ScanKey key;
  if (absl::Status s = RandomKey(&key); !s.ok()) return s;
  const size_t bytes = kHeaderBytes + slots * sizeof(uint64_t);
  // Anonymous pages read as zero (empty slots) and cost memory only once written.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("scan memo: cannot map ", bytes, " bytes"));
  }
  std::unique_ptr<CleanScanMemo> memo(new CleanScanMemo);
  memo->base_ = base;
  memo->bytes_ = bytes;
  auto* mapped = static_cast<uint8_t*>(base);
  memo->table_ = std::make_unique<CleanScanTable>(reinterpret_cast<uint64_t*>(mapped + kHeaderBytes),
                                                  slots, reinterpret_cast<uint64_t*>(mapped), key);
  return memo;
}

absl::StatusOr<std::string> DefaultCleanScanPath() {
  const std::string name =
      absl::StrCat("ringloader/clean-scans-v", kFormatVersion, "-", VersionText(kLibjpegVersion), ".bin");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/", name);
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return absl::StrCat(home, "/.cache/", name);
  return absl::NotFoundError("neither XDG_CACHE_HOME nor HOME names an absolute folder");
}

CleanScanChoice ChooseCleanScanMemo(absl::string_view setting, size_t slots_if_created) {
  CleanScanChoice choice;
  if (setting == "off") {
    choice.kind = "off";
    return choice;
  }
  absl::Status file_status = absl::OkStatus();
  if (setting != "process") {
    absl::StatusOr<std::string> path =
        setting.empty() ? DefaultCleanScanPath() : absl::StatusOr<std::string>(std::string(setting));
    absl::StatusOr<std::unique_ptr<CleanScanMemo>> file =
        path.ok() ? CleanScanMemo::OpenFile(*path, slots_if_created)
                  : absl::StatusOr<std::unique_ptr<CleanScanMemo>>(path.status());
    if (file.ok()) {
      choice.memo = *std::move(file);
      choice.kind = "file";
      return choice;
    }
    file_status = file.status();
  }
  absl::StatusOr<std::unique_ptr<CleanScanMemo>> own = CleanScanMemo::InProcess(slots_if_created);
  if (!own.ok()) {
    choice.kind = "off";
    choice.note = std::string(own.status().message());
    return choice;
  }
  choice.memo = *std::move(own);
  choice.kind = "process";
  if (!file_status.ok()) {
    choice.note = std::string(file_status.message());
  }
  return choice;
}

CleanScanTable* ProcessWideCleanScans() {
  const CleanScanChoice& choice = ProcessChoice();
  return choice.memo ? &choice.memo->table() : nullptr;
}

CleanScanInfo DescribeProcessWideCleanScans() {
  // Not chosen here: asking what the memo is must not create its file (a loader that never
  // decodes a JPEG strictly leaves none behind).
  const CleanScanChoice* choice = process_choice.load(std::memory_order_acquire);
  if (choice == nullptr) {
    CleanScanInfo info;
    info.memo = "unused";
    info.note = "no strict JPEG decode in this process yet: the memo is chosen at the first";
    return info;
  }
  return InfoOf(*choice);
}

}  // namespace ringloader::decode_internal

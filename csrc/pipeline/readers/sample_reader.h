#pragma once
// How the bytes of a sample are got: one SampleReader per kind of bytes (SourceKind), chosen
// once when the loader is created (SampleReaders::Create) and asked by the epoch, which never
// looks at a sample's kind itself.
//
//   kind       reader                 bytes
//   kFile      MakeFileReader         a whole file or a byte range of one (a tar member), read
//                                     asynchronously on the reader thread's FileFetcher
//                                     (io_uring or pread); a remote shard still downloading, or
//                                     a shard whose wanted ranges come into a sparse copy
//                                     (io/range_reads.h), is waited for there
//   kPipe      MakePipeReader         a member of a `pipe:COMMAND` stream (io/stream_cache.h),
//                                     read in the stream's order; no epoch is read ahead
//   kMemory    MakeMemoryReader       bytes the caller owns, decoded where they are
//   kDeferred  MakeDeferredReader     a row of a group a feeder hands over while the epoch runs
//                                     (DeferredRows), held until its decode is done
//
// Internal: nothing here is installed (csrc/include/ringloader/ holds the API only).

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "io/reader.h"
#include "pipeline/sample_store.h"
#include "pipeline/views.h"
#include "ringloader/deferred_rows.h"
#include "ringloader/types.h"

namespace ringloader {

class StreamCache;

// What a reader thread lends a SampleReader for one read (Epoch::ReadWith).
struct ReadContext {
  FileFetcher* fetcher = nullptr;             // the thread's asynchronous reads (io_uring or pread)
  const std::atomic<bool>* cancel = nullptr;  // the epoch's: every wait is sliced against it
  std::atomic<int>* waiting = nullptr;        // gauge: the thread waits on a stream or a group
};

// The bytes a decoder decodes, and what keeps them valid until SampleReader::Release.
struct SampleBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<void> hold;  // set by readers whose bytes are held (a deferred row)
};

// A run of samples [first, first + count).
struct SampleRun {
  int64_t first = 0;
  int64_t count = 0;
};

class SampleReader {
 public:
  virtual ~SampleReader() = default;
  virtual const char* name() const = 0;

  // ---- the epoch's reader threads, in this order ----
  // False when asking for the sample's bytes now would wait (a group not handed over yet, a
  // shard still downloading): a reader thread with reads in flight hands those on first.
  virtual bool Ready(const Sample& sample) const { return true; }
  // Waits until the sample may be asked for (sliced against `ctx.cancel`; not OK only when
  // cancelled), or returns at once when the read itself waits (a file's FileFetcher::Start).
  virtual absl::Status WaitReady(const Sample& sample, const ReadContext& ctx) const { return absl::OkStatus(); }
  // True: the bytes lie where the decoder reads them (Bytes), so the sample takes no read buffer
  // (one only for a several-file sample's other files) and Read is never called.
  virtual bool InPlace() const { return false; }
  // Reads the sample's bytes into `buffer`: nullopt when the read was started on `ctx.fetcher`
  // (its outcome comes from the fetcher's Poll with `tag`), else its outcome now.
  virtual std::optional<absl::Status> Read(const Sample& sample, ByteBuffer* buffer, uint64_t tag,
                                           const ReadContext& ctx) const {
    return absl::InternalError("this reader has no reads (InPlace)");
  }

  // ---- the decoders ----
  // The bytes to decode: `read` is what Read filled (null for InPlace). Whatever is held in
  // `out->hold`, even on failure, is given back by Release once the row is decoded or replaced.
  virtual absl::Status Bytes(const Sample& sample, const ByteBuffer* read, SampleBytes* out) const;
  virtual void Release(const Sample& sample, SampleBytes& bytes) const {}

  // ---- outside the epoch's order: substitutes (kReplace), Loader::DecodeSample ----
  // The sample's bytes, synchronously, without moving anything the epoch reads in order.
  virtual absl::Status ReadAside(const Sample& sample, ByteBuffer* buffer,
                                 const std::atomic<bool>* cancel) const = 0;
  // The samples a substitute for `failed` (sample `index` of `n`) is drawn from; not OK: none.
  virtual absl::StatusOr<SampleRun> SubstitutesFor(const Sample& failed, int64_t index, int64_t n) const {
    return SampleRun{0, n};
  }
  // Whether `candidate` may stand in for `failed` (a sample of this reader's kind).
  virtual bool MayStandIn(const Sample& failed, const Sample& candidate) const { return true; }
  // A ReadAside failure that means the sample is gone for this plan, not bad: passed over
  // without counting an error.
  virtual bool Gone(const absl::Status& status) const { return false; }
  // The local file a queued epoch records the identity of before reading the sample
  // (Epoch::NoteAheadFiles); null: nothing on disk to check.
  virtual const std::string* LocalFile(const Sample& sample) const { return nullptr; }

  // ---- epochs and the loader ----
  // Loader::Create: InvalidArgument when sample `index` of this kind may not have several files
  // (Sample::more_files).
  virtual absl::Status CheckMoreFiles(const Sample& sample, size_t index) const { return absl::OkStatus(); }
  // False when a second epoch may not read ahead beside the one in progress (a stream has one
  // position).
  virtual bool AllowsReadAhead() const { return true; }
  // An epoch about to read `order` (the samples from where it starts), and its end (its last
  // reader is done, or it was cancelled).
  virtual void BeginEpoch(const SampleStore& samples, absl::Span<const int64_t> order) {}
  virtual void EndEpoch() {}
  // Adds this reader's counts to the loader's stats.
  virtual void AddStats(LoaderStats* stats) const {}
  // In a fork()ed child: let go of what belongs to the parent's threads and processes.
  virtual void AfterFork() {}
};

// One reader per kind.
std::unique_ptr<SampleReader> MakeFileReader(size_t max_file_bytes);
std::unique_ptr<SampleReader> MakePipeReader(size_t max_member_bytes);
std::unique_ptr<SampleReader> MakeMemoryReader();
// `rows` outlives the reader.
std::unique_ptr<SampleReader> MakeDeferredReader(DeferredRows* rows);

// Each kind's checks of the samples given to Loader::Create (InvalidArgument naming sample
// `index`; samples of other kinds pass), and of the groups of the kDeferred ones.
absl::Status CheckMemorySample(const Sample& sample, size_t index);
absl::Status CheckPipeSample(const Sample& sample, size_t index);
absl::Status CheckDeferredGroups(const std::vector<Sample>& samples);

// The reader of each kind a loader's samples use, made once when the loader is created. A file
// reader always exists: several-file samples read their other files with it.
class SampleReaders {
 public:
  // Checks the samples of every kind (the Check functions above).
  static absl::Status Check(const std::vector<Sample>& samples);
  static std::unique_ptr<SampleReaders> Create(const SampleStore& samples, size_t max_file_bytes);

  SampleReader& For(const Sample& sample) const { return *by_kind_[static_cast<size_t>(sample.source)]; }

  // The sample's bytes outside the epoch's order (its reader's ReadAside); a known-bad sample
  // fails with its error.
  absl::Status ReadAside(const Sample& sample, ByteBuffer* buffer, const std::atomic<bool>* cancel) const;
  // Whole files (several-file samples), read with the file reader.
  const SampleReader& files() const { return *by_kind_[static_cast<size_t>(SourceKind::kFile)]; }

  bool AllowsReadAhead() const;
  void BeginEpoch(const SampleStore& samples, absl::Span<const int64_t> order);
  void EndEpoch();
  void AddStats(LoaderStats* stats) const;
  void AfterFork();
  // The kDeferred samples' groups (null: none), owned here (Loader::deferred_rows).
  DeferredRows* deferred_rows() const { return deferred_.get(); }

 private:
  std::unique_ptr<DeferredRows> deferred_;
  std::array<std::unique_ptr<SampleReader>, 4> by_kind_;  // indexed by SourceKind
  std::vector<SampleReader*> present_;                    // the readers made, each once
};

// A file of a several-file sample that readers read (not one held in memory).
inline bool ReadFromDisk(const Sample::File& file) { return file.memory == nullptr && file.length != 0; }

// Reads the files of a several-file sample after its own (Sample::more_files) into `more`, one
// buffer each (grow-only; files held in memory are not copied and leave theirs empty). A
// failure names its file (NameFile).
absl::Status ReadMoreFiles(const SampleReaders& readers, const Sample& sample, std::vector<ByteBuffer>* more,
                           const std::atomic<bool>* cancel);

// A sample's files for DecodeRow: file 0's bytes (`data`, `size`), then each of
// Sample::more_files, from memory or from `more` (ReadMoreFiles).
std::vector<EncodedFile> FilesOf(const Sample& sample, const uint8_t* data, size_t size,
                                 const std::vector<ByteBuffer>& more);

}  // namespace ringloader

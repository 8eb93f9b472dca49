// The table of a loader's SampleReaders (see sample_reader.h), and what every kind shares.

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "pipeline/readers/sample_reader.h"

namespace ringloader {

absl::Status SampleReader::Bytes(const Sample& sample, const ByteBuffer* read, SampleBytes* out) const {
  if (read != nullptr) {
    out->data = read->data();
    out->size = read->size();
  }
  return absl::OkStatus();
}

absl::Status SampleReaders::Check(const std::vector<Sample>& samples) {
  for (size_t i = 0; i < samples.size(); ++i) {
    // A value past the last kind has no reader (For indexes the table by kind).
    if (samples[i].source > SourceKind::kDeferred) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample ", i, " (", samples[i].path, ") has source ", static_cast<int>(samples[i].source),
          ", which is no SourceKind: kFile, kPipe, kMemory or kDeferred"));
    }
    RL_RETURN_IF_ERROR(CheckMemorySample(samples[i], i));
    RL_RETURN_IF_ERROR(CheckPipeSample(samples[i], i));
  }
  return CheckDeferredGroups(samples);
}

std::unique_ptr<SampleReaders> SampleReaders::Create(const SampleStore& samples, size_t max_file_bytes) {
  auto readers = std::make_unique<SampleReaders>();
  bool present[4] = {true, false, false, false};  // the file reader always (several-file samples)
  int64_t groups = 0;
  for (const Sample& s : samples.samples()) {
    present[static_cast<size_t>(s.source)] = true;
    if (s.source == SourceKind::kDeferred) groups = std::max<int64_t>(groups, s.group + 1);
  }
  readers->by_kind_[static_cast<size_t>(SourceKind::kFile)] = MakeFileReader(max_file_bytes);
  if (present[static_cast<size_t>(SourceKind::kPipe)]) {
    readers->by_kind_[static_cast<size_t>(SourceKind::kPipe)] = MakePipeReader(max_file_bytes);
  }
  if (present[static_cast<size_t>(SourceKind::kMemory)]) {
    readers->by_kind_[static_cast<size_t>(SourceKind::kMemory)] = MakeMemoryReader();
  }
  if (groups > 0) {
    readers->deferred_ = std::make_unique<DeferredRows>(groups);
    readers->by_kind_[static_cast<size_t>(SourceKind::kDeferred)] = MakeDeferredReader(readers->deferred_.get());
  }
  for (const auto& reader : readers->by_kind_) {
    if (reader) readers->present_.push_back(reader.get());
  }
  return readers;
}

absl::Status SampleReaders::ReadAside(const Sample& sample, ByteBuffer* buffer, const std::atomic<bool>* cancel) const {
  if (!sample.error.empty()) return absl::DataLossError(sample.error);
  return For(sample).ReadAside(sample, buffer, cancel);
}

bool SampleReaders::AllowsReadAhead() const {
  return std::all_of(present_.begin(), present_.end(), [](const SampleReader* r) { return r->AllowsReadAhead(); });
}

void SampleReaders::BeginEpoch(const SampleStore& samples, absl::Span<const int64_t> order) {
  for (SampleReader* reader : present_) reader->BeginEpoch(samples, order);
}

void SampleReaders::EndEpoch() {
  for (SampleReader* reader : present_) reader->EndEpoch();
}

void SampleReaders::AddStats(LoaderStats* stats) const {
  for (const SampleReader* reader : present_) reader->AddStats(stats);
}

void SampleReaders::AfterFork() {
  for (SampleReader* reader : present_) reader->AfterFork();
}

absl::Status ReadMoreFiles(const SampleReaders& readers, const Sample& sample, std::vector<ByteBuffer>* more,
                           const std::atomic<bool>* cancel) {
  if (more->size() < sample.more_files.size()) more->resize(sample.more_files.size());
  for (size_t k = 0; k < sample.more_files.size(); ++k) {
    const Sample::File& file = sample.more_files[k];
    if (!ReadFromDisk(file)) continue;
    Sample whole(file.path, 0);
    absl::Status status = readers.files().ReadAside(whole, &(*more)[k], cancel);
    if (!status.ok()) return NameFile(status, file.path);
  }
  return absl::OkStatus();
}

std::vector<EncodedFile> FilesOf(const Sample& sample, const uint8_t* data, size_t size,
                                 const std::vector<ByteBuffer>& more) {
  std::vector<EncodedFile> files;
  files.reserve(1 + sample.more_files.size());
  files.push_back(EncodedFile{data, size, &sample.path});
  for (size_t k = 0; k < sample.more_files.size(); ++k) {
    const Sample::File& file = sample.more_files[k];
    if (ReadFromDisk(file)) {
      files.push_back(EncodedFile{more[k].data(), more[k].size(), &file.path});
    } else {
      files.push_back(EncodedFile{file.memory, static_cast<size_t>(file.length), &file.path});
    }
  }
  return files;
}

}  // namespace ringloader

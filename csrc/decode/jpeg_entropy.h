#pragma once
/// A Huffman entropy decoder that stands in for libjpeg's inside a libjpeg decode.
///
/// Entropy decoding is most of a training sample's cost (about 60% of the loader's CPU). This
/// decoder replaces the library's `decode_mcu` for single-scan, 8-bit, Huffman-coded files after
/// jpeg_start_decompress (`Install`), and for the scans of progressive 8-bit Huffman files from
/// inside it (`InstallProgressive`, through a `ProgressiveMonitor`): its tables resolve the next
/// one or two coefficients' codes, runs and values in one lookup for the common short codes,
/// and its bit reader loads eight bytes at a time where no 0xFF is among them. It writes the
/// coefficients the library would, block for block.
///
/// It never decides a verdict. Whenever the data leaves the plain case (a code no table has, a
/// marker inside the scan, data missing, bytes between the scan's end and the next marker, a
/// restart marker out of place), it stops with `bailed()` set and the decode is to be redone
/// with the library's own decoder, which then gives exactly the result and the warnings it
/// always gave. Clean files therefore decode to the same pixels, and damaged ones to the same
/// verdict, with or without it.
///
/// `RINGLOADER_JPEG_ENTROPY=libjpeg` in the environment keeps the library's decoder.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include <jpeglib.h>

namespace ringloader::decode_internal {

/// Whether the decoder is enabled in this process (RINGLOADER_JPEG_ENTROPY, read once).
bool OwnEntropyEnabled();
/// Overrides the environment (tests compare both decoders).
void SetOwnEntropyEnabled(bool on);

/// libjpeg's `struct jpeg_entropy_decoder` (jpegint.h, unchanged since IJG 6b; jpeglib.h
/// declares cinfo->entropy as a pointer to it without its members), mirrored so that no build
/// needs jpegint.h.
struct EntropyInterface {
  void (*start_pass)(j_decompress_ptr) = nullptr;
  boolean (*decode_mcu)(j_decompress_ptr, JBLOCKROW*) = nullptr;
  boolean insufficient_data = FALSE;
};

/// One Huffman table, derived for decoding.
struct HuffTable {
  static constexpr int kFastBits = 10;
  /// Codes of up to kFastBits bits: (length << 8) | symbol; 0 for longer codes.
  uint16_t fast[1 << kFastBits];
  /// AC tables: the first one or two whole coefficients (code and value bits) in kFastBits
  /// bits, so that one lookup decodes two where both fit: bits 0-3 the bits they take, 4-7
  /// the first's zero run, 8-12 how far the second lies past the first, 16-23 and 24-31
  /// their values. Without a second: distance 0 and the first's value again (so writing
  /// both writes the one). 0 when not even one fits (or a value is outside int8).
  uint32_t fast_ac[1 << kFastBits];
  /// libjpeg's canonical-code bounds: the largest code of each length (-1: none), and the
  /// offset from a code of that length to its symbol's index.
  int32_t maxcode[18];
  int32_t valoffset[18];
  uint8_t values[256];
  /// The file table it was derived from (its code counts and `values`), so that the next
  /// file with the same table, the usual case, does not derive it again.
  uint8_t counts[17];
  bool derived = false;
};

/// Where the entropy decoder stood at the start of an MCU of a scan: enough to go on
/// decoding from there (the byte and bit of the next code, the DC predictors, the restart
/// count), recorded by a decode that read the scan of the same bytes to its end.
struct ResumePoint {
  uint32_t mcu = 0;     // the MCU it precedes
  uint32_t offset = 0;  // the byte holding the next bit, from the scan's first byte
  uint8_t bit = 0;      // bits of that byte already read
  uint8_t next_restart = 0;
  uint16_t restarts_to_go = 0;
  int16_t dc[4] = {0, 0, 0, 0};
};

/// After jpeg_crop_scanline moved the crop's left edge to `xoffset`: the first and last MCU
/// columns the library transforms (its first_iMCU_col and last_iMCU_col, which jpeglib.h
/// does not show).
void CropColumns(j_decompress_ptr cinfo, JDIMENSION xoffset, uint64_t* first, uint64_t* last);

/// The resume points of the scans this process has read clean to their end, by the keyed
/// content fingerprint of the memo of clean scans (decode/clean_scans.h) and the file's size:
/// a later decode of the same bytes that needs only some rows and columns (a crop) starts its
/// entropy decoding at the last point above them instead of the top of the scan, and on each
/// row of the crop at the last point left of it, leaving the rest of the row undecoded.
///
/// A decode records kPointsPerRow points on each MCU row (the row's start and evenly spaced
/// columns), fewer per row and then on fewer rows past kMaxPointsPerScan; 20 bytes each, about
/// 2 KB for a 500x375 4:2:0 photo. Once half of the byte limit (RINGLOADER_SCAN_INDEX_MB,
/// default 64; 0 turns the index off) is taken, a scan keeps only kThinPoints of its points,
/// evenly spaced (a crop then starts near its first row, but its rows are decoded whole), so
/// that a large dataset still gets points for many more scans; at the limit it takes no more.
class ScanIndex {
 public:
  static constexpr int kPointsPerRow = 4;
  static constexpr int kMaxPointsPerScan = 1024;
  static constexpr int kThinPoints = 16;

  explicit ScanIndex(uint64_t limit_bytes) : limit_(limit_bytes) {}
  static ScanIndex& ProcessWide();

  /// The points of the scan with this fingerprint and size into `points`; false if none.
  bool Find(uint64_t fingerprint, uint64_t size, std::vector<ResumePoint>* points) const;
  /// Remembers `points` (sorted by MCU) for the scan, thinned past half the limit; false if
  /// the table is full.
  bool Add(uint64_t fingerprint, uint64_t size, const std::vector<ResumePoint>& points);

  uint64_t bytes() const;
  uint64_t scans() const;

 private:
  struct Entry {
    uint64_t size;
    std::vector<ResumePoint> points;
  };
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, Entry> map_;
  uint64_t bytes_ = 0;
  const uint64_t limit_;
};

class BaselineEntropy {
 public:
  BaselineEntropy() = default;
  BaselineEntropy(const BaselineEntropy&) = delete;
  BaselineEntropy& operator=(const BaselineEntropy&) = delete;

  /// After jpeg_start_decompress and before any row is read: takes over the scan's entropy
  /// decoding when the file qualifies (one scan holding every component, sequential Huffman,
  /// 8-bit). Returns whether it did. It stays installed until the next jpeg_start_decompress.
  bool Install(j_decompress_ptr cinfo);
  /// For a progressive Huffman 8-bit file, from the progress monitor's first call inside
  /// jpeg_start_decompress (the first scan's start_pass has run, none of its data has been
  /// read): takes over the entropy decoding of every scan (DC and AC, first and refinement),
  /// writing the coefficients the library would. The library's own start_pass still checks
  /// each scan's parameters and the progression, with its warnings and errors; a scan whose
  /// tables it does not take is left to the library, with the scans after it. Returns
  /// whether it did.
  bool InstallProgressive(j_decompress_ptr cinfo);

  /// It met data it leaves to the library (see above) and raised a libjpeg error to stop the
  /// decode; the caller redoes the decode without it.
  bool bailed() const { return core_.bailed; }

  /// After Install, before the first MCU: record resume points into `points` (cleared) as the
  /// scan is decoded, up to the last MCU the decode reaches.
  void Record(std::vector<ResumePoint>* points);
  /// After Install, before the first MCU: MCUs the library asks to skip (no coefficient buffer)
  /// and those outside the columns `first_col`..`last_col` (MCU columns: the library's crop,
  /// whose blocks alone it transforms) are not decoded; each MCU it needs is reached from the
  /// last of `points` at or before it, or by decoding on from where the decoder stands
  /// (points of this very scan, sorted; they must outlive the decode). Only for bytes read
  /// clean to their end before: the data of the MCUs passed over is never read. Points of a
  /// decode that stopped early are continued: those the decode passes after the last of
  /// `points` are appended to it, as Record would have recorded them.
  void Resume(std::vector<ResumePoint>* points, uint64_t first_col = 0, uint64_t last_col = ~uint64_t{0});
  /// Whether the last decode started from a resume point past the scan's start.
  bool resumed() const { return core_.resumed; }

  /// The state the library calls into; it begins with the library's interface, so
  /// cinfo->entropy can point here.
  struct Core {
    EntropyInterface pub;

    bool bailed = false;
    // Bit reader: the top `bits` bits of `acc` are the stream's next bits, the rest are zero.
    // Past a marker the stream reads as zero bits; `pad` of the buffered bits are such.
    uint64_t acc = 0;
    int bits = 0;
    int pad = 0;
    bool at_marker = false;
    const uint8_t* pos = nullptr;
    const uint8_t* end = nullptr;
    int last_dc[MAX_COMPS_IN_SCAN] = {};
    unsigned restart_interval = 0;
    unsigned restarts_to_go = 0;
    int next_restart = 0;
    uint64_t mcu = 0;
    uint64_t total_mcus = 0;
    uint64_t mcus_per_row = 1;
    int blocks = 0;
    // Resume points: the scan's first byte, the MCU at which to record the next point, the
    // MCU columns between points on a row that has them and the rows between such rows; the
    // points being recorded, or those to resume from.
    const uint8_t* scan_begin = nullptr;
    uint64_t next_point = ~uint64_t{0};
    uint64_t point_cols = 1;
    uint64_t point_rows = 1;
    std::vector<ResumePoint>* recording = nullptr;
    const std::vector<ResumePoint>* resume = nullptr;
    // Resuming: the MCUs the library asks for are counted (`call`, the next one's index) and
    // only those it needs are decoded (`mcu` is where the decoder stands); it needs those
    // with a coefficient buffer in the columns first_col..last_col, and the scan's last.
    bool deferring = false;
    uint64_t call = 0;
    uint64_t first_col = 0;
    uint64_t last_col = ~uint64_t{0};
    bool resumed = false;
    // Progressive scans: the band (first and last coefficient), the bit position, the blocks
    // still to skip in an end-of-band run, the band's table; the library's own entropy
    // decoder, whose start_pass checks each new scan.
    int ss = 1;
    int se = DCTSIZE2 - 1;
    int al = 0;
    unsigned eobrun = 0;
    const HuffTable* band = nullptr;
    EntropyInterface* library = nullptr;
    struct Block {
      const HuffTable* dc = nullptr;
      const HuffTable* ac = nullptr;
      int comp = 0;
      bool dc_needed = false;
      bool ac_needed = false;
    } block[D_MAX_BLOCKS_IN_MCU];
    HuffTable dc_tables[NUM_HUFF_TBLS];
    HuffTable ac_tables[NUM_HUFF_TBLS];
  };

 private:
  Core core_;
};

/// The libjpeg progress monitor through which a progressive file's scans get the project's
/// decoder: BaselineEntropy::InstallProgressive at its first call inside
/// jpeg_start_decompress. `then`, if set, is called on every call (a monitor of the caller's).
struct ProgressiveMonitor {
  jpeg_progress_mgr pub{};  // first member: libjpeg hands &pub back to Monitor
  BaselineEntropy* entropy = nullptr;
  void (*then)(j_common_ptr) = nullptr;
  bool pending = false;    // armed for a decode whose first call has not come
  bool installed = false;  // InstallProgressive took the file

  explicit ProgressiveMonitor(BaselineEntropy* e, void (*also)(j_common_ptr) = nullptr)
      : entropy(e), then(also) {
    pub.progress_monitor = Monitor;
  }
  /// Before jpeg_start_decompress (the header read): installs over this decode if `on` and
  /// the file is progressive; also makes this cinfo's progress monitor.
  void Arm(j_decompress_ptr cinfo, bool on) {
    pending = on && cinfo->progressive_mode;
    installed = false;
    cinfo->progress = &pub;
  }
  static void Monitor(j_common_ptr cinfo);
};

}  // namespace ringloader::decode_internal

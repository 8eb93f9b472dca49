#pragma once
/// A baseline Huffman entropy decoder that stands in for libjpeg's inside a libjpeg decode.
///
/// Entropy decoding is most of a training sample's cost (about 60% of the loader's CPU). This
/// decoder replaces the library's `decode_mcu` for single-scan, 8-bit, Huffman-coded files after
/// jpeg_start_decompress: its tables resolve a coefficient's code, run and value in one lookup
/// for the common short codes, and its bit reader loads eight bytes at a time where no 0xFF is
/// among them. It writes the coefficients the library would, block for block.
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

#include <jpeglib.h>

namespace ringloader::decode_internal {

/// Whether the decoder is enabled in this process (RINGLOADER_JPEG_ENTROPY, read once; off
/// where the build found no jpegint.h).
bool OwnEntropyEnabled();
/// Overrides the environment (tests compare both decoders).
void SetOwnEntropyEnabled(bool on);

/// One Huffman table, derived for decoding.
struct HuffTable {
  static constexpr int kFastBits = 10;
  /// Codes of up to kFastBits bits: (length << 8) | symbol; 0 for longer codes.
  uint16_t fast[1 << kFastBits];
  /// AC tables: a whole coefficient whose code and value bits fit in kFastBits, as
  /// (value << 8) | (run << 4) | (code + value bits); 0 otherwise.
  int16_t fast_ac[1 << kFastBits];
  /// libjpeg's canonical-code bounds: the largest code of each length (-1: none), and the
  /// offset from a code of that length to its symbol's index.
  int32_t maxcode[18];
  int32_t valoffset[18];
  uint8_t values[256];
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

  /// It met data it leaves to the library (see above) and raised a libjpeg error to stop the
  /// decode; the caller redoes the decode without it.
  bool bailed() const { return core_.bailed; }

  /// The state the library calls into. Its first three members are libjpeg's
  /// `struct jpeg_entropy_decoder` (jpegint.h; unchanged since IJG 6b), so cinfo->entropy can
  /// point here.
  struct Core {
    void (*start_pass)(j_decompress_ptr) = nullptr;
    boolean (*decode_mcu)(j_decompress_ptr, JBLOCKROW*) = nullptr;
    boolean insufficient_data = FALSE;

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
    int blocks = 0;
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

}  // namespace ringloader::decode_internal

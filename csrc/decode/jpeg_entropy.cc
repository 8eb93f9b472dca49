#include "decode/jpeg_entropy.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

// Only jpeglib.h's public declarations are used (EntropyInterface mirrors the one internal
// struct), so builds without libjpeg's jpegint.h (the wheels') have the decoder too.
#include <jerror.h>

namespace ringloader::decode_internal {

namespace {
std::atomic<int>& EntropySetting() {  // 1 on, 0 off
  static std::atomic<int> setting = [] {
    const char* v = std::getenv("RINGLOADER_JPEG_ENTROPY");
    return v == nullptr || std::strcmp(v, "libjpeg") != 0 ? 1 : 0;
  }();
  return setting;
}
}  // namespace

bool OwnEntropyEnabled() { return EntropySetting().load(std::memory_order_relaxed) != 0; }

void SetOwnEntropyEnabled(bool on) {
  EntropySetting().store(on ? 1 : 0, std::memory_order_relaxed);
}

namespace {

using Core = BaselineEntropy::Core;
// libjpeg calls through cinfo->entropy: Core must begin as `struct jpeg_entropy_decoder` does.
static_assert(std::is_standard_layout_v<Core> && offsetof(Core, pub) == 0);
static_assert(offsetof(EntropyInterface, decode_mcu) == sizeof(void*));
static_assert(offsetof(EntropyInterface, insufficient_data) == 2 * sizeof(void*));
constexpr int kFast = HuffTable::kFastBits;

/// Zigzag to natural order, with libjpeg's 16 extra entries: a corrupt run past the last
/// coefficient writes coefficient 63, as the library does.
constexpr uint8_t kNatural[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

/// Value of `size` raw bits as the JPEG standard signs them (F.2.2.1's EXTEND).
inline int Extend(int raw, int size) {
  return raw < (1 << (size - 1)) ? raw + static_cast<int>(~0u << size) + 1 : raw;
}

/// Stops the decode: the caller redoes it with the library's decoder.
[[noreturn]] void Bail(j_decompress_ptr cinfo, Core& c) {
  c.bailed = true;
  ERREXIT(cinfo, JERR_NOTIMPL);
  std::abort();  // error_exit never returns
}

/// Builds `t` from the file's table as jpeg_make_d_derived_tbl does (which has already run on
/// it and refused a malformed one). Returns false for a table it cannot take.
bool Derive(const JHUFF_TBL* h, bool ac, HuffTable* t) {
  if (h == nullptr) return false;
  static_assert(sizeof(t->counts) == sizeof(h->bits) && sizeof(t->values) == sizeof(h->huffval));
  if (t->derived && std::memcmp(t->counts, h->bits, sizeof(t->counts)) == 0 &&
      std::memcmp(t->values, h->huffval, sizeof(t->values)) == 0) {
    return true;
  }
  t->derived = false;
  uint8_t sizes[257];
  int codes[257];
  int n = 0;
  for (int len = 1; len <= 16; ++len) {
    const int count = h->bits[len];
    if (n + count > 256) return false;
    for (int i = 0; i < count; ++i) sizes[n++] = static_cast<uint8_t>(len);
  }
  sizes[n] = 0;
  int code = 0;
  int si = sizes[0];
  for (int p = 0; sizes[p] != 0;) {
    while (sizes[p] == si) codes[p++] = code++;
    if (code >= (1 << si)) return false;
    code <<= 1;
    ++si;
  }
  for (int len = 1, p = 0; len <= 16; ++len) {
    if (h->bits[len] != 0) {
      t->valoffset[len] = p - codes[p];
      p += h->bits[len];
      t->maxcode[len] = codes[p - 1];
    } else {
      t->maxcode[len] = -1;
    }
  }
  t->valoffset[17] = 0;
  t->maxcode[17] = 0xFFFFF;
  // DC symbols are value sizes: libjpeg refuses a DC table with one over 15.
  if (!ac && std::any_of(h->huffval, h->huffval + n, [](UINT8 v) { return v > 15; })) return false;
  std::memcpy(t->values, h->huffval, sizeof(t->values));
  std::memcpy(t->counts, h->bits, sizeof(t->counts));
  std::memset(t->fast, 0, sizeof(t->fast));
  std::memset(t->fast_ac, 0, sizeof(t->fast_ac));
  for (int p = 0; p < n; ++p) {
    const int len = sizes[p];
    if (len > kFast) break;
    const int first = codes[p] << (kFast - len);
    const int span = 1 << (kFast - len);
    const auto entry = static_cast<uint16_t>((len << 8) | h->huffval[p]);
    for (int i = 0; i < span; ++i) t->fast[first + i] = entry;
  }
  if (!ac) return t->derived = true;
  // A coefficient at the head of `idx`'s bits: its bits, run and value, or false.
  const auto coefficient = [t](int idx, int avail, int* used, int* run, int* value) {
    const unsigned e = t->fast[idx];
    const int len = static_cast<int>(e >> 8);
    const int size = static_cast<int>(e & 15);
    if (e == 0 || size == 0 || len + size > avail) return false;
    *value = Extend((idx >> (kFast - len - size)) & ((1 << size) - 1), size);
    *run = static_cast<int>(e & 0xFF) >> 4;
    *used = len + size;
    return *value >= -128 && *value <= 127;
  };
  for (int idx = 0; idx < (1 << kFast); ++idx) {
    int used = 0, run = 0, value = 0;
    if (!coefficient(idx, kFast, &used, &run, &value)) continue;
    int used2 = 0, run2 = 0, value2 = value;
    int gap = 0;  // the second coefficient's distance past the first
    if (coefficient((idx << used) & ((1 << kFast) - 1), kFast - used, &used2, &run2, &value2)) {
      gap = run2 + 1;
    } else {
      used2 = 0;
      value2 = value;
    }
    t->fast_ac[idx] = static_cast<uint32_t>(used + used2) | static_cast<uint32_t>(run << 4) |
                      static_cast<uint32_t>(gap << 8) |
                      (static_cast<uint32_t>(value & 0xFF) << 16) |
                      (static_cast<uint32_t>(value2 & 0xFF) << 24);
  }
  return t->derived = true;
}

/// The bit reader's working state, kept in registers by the decode loop (passed by value to
/// the one call that is not inlined).
struct Bits {
  uint64_t acc;
  int bits;
  const uint8_t* pos;
};

/// Fills the bit buffer to more than 56 bits a byte at a time: unstuffs FF 00, and stops at a
/// marker (or the end of the data), after which zero bits are supplied, counted in `pad`.
__attribute__((noinline)) Bits RefillSlow(Core& c, Bits r) {
  while (r.bits <= 56) {
    if (c.at_marker) {
      c.pad += 64 - r.bits;
      r.bits = 64;
      break;
    }
    if (r.pos >= c.end) {
      c.at_marker = true;
      continue;
    }
    const uint8_t b = r.pos[0];
    if (b == 0xFF) {
      if (r.pos + 1 >= c.end || r.pos[1] != 0) {
        c.at_marker = true;
        continue;
      }
      r.pos += 2;
    } else {
      r.pos += 1;
    }
    r.acc |= static_cast<uint64_t>(b) << (56 - r.bits);
    r.bits += 8;
  }
  return r;
}

/// Tops the buffer up to at least 32 bits (enough for a code and its value bits).
[[gnu::always_inline]] inline void Refill(Core& c, Bits& r) {
  if (__builtin_expect(r.bits >= 32, 1)) return;
  if (__builtin_expect(c.end - r.pos >= 8, 1)) {
    uint64_t w;
    std::memcpy(&w, r.pos, 8);
    w = __builtin_bswap64(w);
    const uint64_t inv = ~w;
    // No byte of w is 0xFF (no zero byte in ~w): all eight are plain data. (Past a marker
    // the slow path runs: the marker's FF is among the next eight bytes.)
    if (((inv - 0x0101010101010101ull) & ~inv & 0x8080808080808080ull) == 0 && !c.at_marker) {
      const int take = (63 - r.bits) >> 3;
      r.acc |= (w >> r.bits) & ~(~0ull >> (r.bits + 8 * take));
      r.pos += take;
      r.bits += 8 * take;
      return;
    }
  }
  r = RefillSlow(c, r);
}

/// A Huffman symbol whose code is not in the fast table (longer than kFast bits), decoded as
/// jpeg_huff_decode does. The buffer holds at least 16 bits.
[[gnu::always_inline]] inline int DecodeLong(j_decompress_ptr cinfo, Core& c, const HuffTable& t,
                                             Bits& r) {
  int len = kFast + 1;
  int code = static_cast<int>(r.acc >> (64 - len));
  while (code > t.maxcode[len]) {
    ++len;
    if (len > 16) Bail(cinfo, c);
    code = static_cast<int>(r.acc >> (64 - len));
  }
  r.acc <<= len;
  r.bits -= len;
  return t.values[(code + t.valoffset[len]) & 0xFF];
}

[[gnu::always_inline]] inline int DecodeSymbol(j_decompress_ptr cinfo, Core& c, const HuffTable& t,
                                               Bits& r) {
  const unsigned e = t.fast[r.acc >> (64 - kFast)];
  if (__builtin_expect(e != 0, 1)) {
    const int len = static_cast<int>(e >> 8);
    r.acc <<= len;
    r.bits -= len;
    return static_cast<int>(e & 0xFF);
  }
  return DecodeLong(cinfo, c, t, r);
}

[[gnu::always_inline]] inline int TakeBits(Bits& r, int n) {
  const int raw = static_cast<int>(r.acc >> (64 - n));
  r.acc <<= n;
  r.bits -= n;
  return raw;
}

/// A value at the scan's bit position `al`, as the library's LEFT_SHIFT stores it.
inline JCOEF AtBit(int value, int al) {
  return static_cast<JCOEF>(static_cast<int>(static_cast<unsigned>(value) << al));
}

/// The one or two coefficients of one AC table lookup at coefficient `k`, if both lie at or
/// before `last` (the library ends a block or band there, so a second one past it belongs to
/// the general path, which does what the library does): consumed, written at bit `al` (with
/// kWrite), `k` moved past them. False, with nothing consumed, otherwise.
template <bool kWrite>
[[gnu::always_inline]] inline bool FastAc(const HuffTable& t, Bits& r, int& k, int last,
                                          JCOEF* block, int al) {
  const uint32_t f = t.fast_ac[r.acc >> (64 - kFast)];
  const int first = k + static_cast<int>((f >> 4) & 15);
  const int second = first + static_cast<int>((f >> 8) & 31);
  if (f == 0 || second > last) return false;
  const int len = static_cast<int>(f & 15);
  r.acc <<= len;
  r.bits -= len;
  if (kWrite) {
    block[kNatural[first]] = AtBit(static_cast<int8_t>(f >> 16), al);
    block[kNatural[second]] = AtBit(static_cast<int32_t>(f) >> 24, al);
  }
  k = second + 1;
  return true;
}

/// After a refill (32 bits or more): up to three AC table lookups (10 bits each at most)
/// before the buffer needs checking again. False if the first one missed.
template <bool kWrite>
[[gnu::always_inline]] inline bool FastAcRun(const HuffTable& t, Bits& r, int& k, int last,
                                             JCOEF* block, int al) {
  static_assert(3 * kFast <= 32);
  if (!FastAc<kWrite>(t, r, k, last, block, al)) return false;
  if (k <= last && FastAc<kWrite>(t, r, k, last, block, al) && k <= last) {
    FastAc<kWrite>(t, r, k, last, block, al);
  }
  return true;
}

/// One block's AC coefficients; `Write`: into `block` (zeroed by the caller), else discarded.
template <bool kWrite>
[[gnu::always_inline]] inline void DecodeAc(j_decompress_ptr cinfo, Core& c, const HuffTable& t,
                                            JCOEF* block, Bits& r) {
  for (int k = 1; k < 64;) {
    Refill(c, r);
    if (FastAcRun<kWrite>(t, r, k, 63, block, 0)) continue;
    const int rs = DecodeSymbol(cinfo, c, t, r);
    const int size = rs & 15;
    const int run = rs >> 4;
    if (size == 0) {
      if (run != 15) break;
      k += 16;
      continue;
    }
    k += run;
    const int raw = TakeBits(r, size);
    if (kWrite) block[kNatural[k]] = static_cast<JCOEF>(Extend(raw, size));
    ++k;
  }
}

/// The bit reader, emptied, to read on from `pos`.
void ReadFrom(Core& c, const uint8_t* pos) {
  c.pos = pos;
  c.acc = 0;
  c.bits = 0;
  c.pad = 0;
  c.at_marker = false;
}

/// At the end of a restart interval or of the scan: all the buffer holds past the bits read is
/// the current byte's padding (whole bytes would be data libjpeg discards with a warning, or
/// reads silently: the library takes over).
void OnlyPaddingLeft(j_decompress_ptr cinfo, Core& c) {
  const int real = c.bits - c.pad;
  if (real < 0 || real >= 8) Bail(cinfo, c);
}

/// At a restart interval's end: the next marker must be the expected RSTn (libjpeg warns
/// otherwise: the library takes over).
void Restart(j_decompress_ptr cinfo, Core& c) {
  OnlyPaddingLeft(cinfo, c);
  const uint8_t* p = c.pos;
  if (c.end - p < 2 || p[0] != 0xFF || p[1] != JPEG_RST0 + c.next_restart) Bail(cinfo, c);
  ReadFrom(c, p + 2);
  for (int& dc : c.last_dc) dc = 0;
  c.eobrun = 0;
  c.next_restart = (c.next_restart + 1) & 7;
  c.restarts_to_go = c.restart_interval;
}

/// After the scan's last MCU: only padding may be left before the next marker, where the
/// library's marker reader goes on.
void EndScan(j_decompress_ptr cinfo, Core& c) {
  OnlyPaddingLeft(cinfo, c);
  const uint8_t* p = c.pos;
  // A marker, after any fill bytes (FF FF ... D9). The library's bit reader takes FF FF... 00
  // for a stuffed FF and drops it silently, where its marker reader would warn: left to it.
  const uint8_t* q = p;
  while (q < c.end && *q == 0xFF) ++q;
  if (q == p || q >= c.end || *q == 0 || (*q >= JPEG_RST0 && *q <= JPEG_RST0 + 7)) Bail(cinfo, c);
  jpeg_source_mgr* src = cinfo->src;
  src->bytes_in_buffer -= static_cast<size_t>(p - src->next_input_byte);
  src->next_input_byte = p;
  cinfo->unread_marker = 0;
}

/// The MCU after `mcu` at which a point is recorded: the next of every point_cols-th column
/// on every point_rows-th row.
uint64_t NextPoint(const Core& c, uint64_t mcu) {
  const uint64_t row = mcu / c.mcus_per_row;
  const uint64_t col = mcu % c.mcus_per_row;
  if (row % c.point_rows == 0 && col + c.point_cols < c.mcus_per_row) return mcu + c.point_cols;
  return (row / c.point_rows + 1) * c.point_rows * c.mcus_per_row;
}

/// Records points into `points` from the first one past MCU `after` on: kPointsPerRow columns
/// on every row, fewer past kMaxPointsPerScan points, then on fewer rows. Not for a scan a
/// point cannot address (MCU index and byte offset 32-bit).
void StartRecording(Core& c, std::vector<ResumePoint>* points, uint64_t after) {
  if (c.total_mcus == 0 || c.total_mcus > UINT32_MAX || c.end - c.scan_begin > INT32_MAX) return;
  const uint64_t rows = (c.total_mcus + c.mcus_per_row - 1) / c.mcus_per_row;
  const uint64_t per_row = std::clamp<uint64_t>(ScanIndex::kMaxPointsPerScan / rows, 1, ScanIndex::kPointsPerRow);
  c.point_cols = std::max<uint64_t>(1, (c.mcus_per_row + per_row - 1) / per_row);
  c.point_rows = std::max<uint64_t>(1, (rows + ScanIndex::kMaxPointsPerScan - 1) / ScanIndex::kMaxPointsPerScan);
  c.recording = points;
  c.next_point = NextPoint(c, after);
}

/// Appends the state at the start of MCU c.mcu to the points being recorded.
void RecordPoint(Core& c) {
  c.next_point = NextPoint(c, c.mcu);
  const int real = c.bits - c.pad;  // unread stream bits in the buffer
  if (real < 0) return;
  // Back over the data bytes those bits came from (a stuffed FF 00 is one data byte).
  const int whole = (real + 7) / 8;
  const uint8_t* q = c.pos;
  for (int i = 0; i < whole; ++i) q -= (q - c.scan_begin >= 2 && q[-1] == 0 && q[-2] == 0xFF) ? 2 : 1;
  if (q < c.scan_begin || c.restarts_to_go > 0xFFFF) return;
  ResumePoint p;
  p.mcu = static_cast<uint32_t>(c.mcu);
  p.offset = static_cast<uint32_t>(q - c.scan_begin);
  p.bit = static_cast<uint8_t>(8 * whole - real);
  p.next_restart = static_cast<uint8_t>(c.next_restart);
  p.restarts_to_go = static_cast<uint16_t>(c.restarts_to_go);
  for (int i = 0; i < MAX_COMPS_IN_SCAN; ++i) {
    if (c.last_dc[i] < INT16_MIN || c.last_dc[i] > INT16_MAX) return;
    p.dc[i] = static_cast<int16_t>(c.last_dc[i]);
  }
  c.recording->push_back(p);
}

/// After an MCU: the reader's state kept, data read past a marker given up on, the restart
/// count and the scan's end.
[[gnu::always_inline]] inline void EndMcu(j_decompress_ptr cinfo, Core& c, const Bits& r) {
  c.acc = r.acc;
  c.bits = r.bits;
  c.pos = r.pos;
  if (c.pad != 0 && r.bits < c.pad) Bail(cinfo, c);  // read past a marker: data is missing
  if (c.restart_interval != 0) --c.restarts_to_go;
  if (++c.mcu == c.total_mcus) EndScan(cinfo, c);
}

/// The MCU at c.mcu, into `data` (nullptr: decoded, not kept).
[[gnu::always_inline]] inline void DecodeNext(j_decompress_ptr cinfo, Core& c, JBLOCKROW* data) {
  if (__builtin_expect(c.mcu == c.next_point, 0)) RecordPoint(c);
  if (c.restart_interval != 0 && c.restarts_to_go == 0) Restart(cinfo, c);
  Bits r{c.acc, c.bits, c.pos};
  for (int b = 0; b < c.blocks; ++b) {
    const Core::Block& blk = c.block[b];
    Refill(c, r);
    int s = DecodeSymbol(cinfo, c, *blk.dc, r);
    if (s != 0) s = Extend(TakeBits(r, s), s);
    JCOEF* block = data != nullptr ? data[b][0] : nullptr;
    if (blk.dc_needed) {
      // Wraps as the library's int sum does on the malformed files that overflow it.
      s = static_cast<int>(static_cast<unsigned>(s) + static_cast<unsigned>(c.last_dc[blk.comp]));
      c.last_dc[blk.comp] = s;
      if (block != nullptr) block[0] = static_cast<JCOEF>(s);
    }
    if (blk.ac_needed && block != nullptr) {
      DecodeAc<true>(cinfo, c, *blk.ac, block, r);
    } else {
      DecodeAc<false>(cinfo, c, *blk.ac, nullptr, r);
    }
  }
  EndMcu(cinfo, c, r);
}

/// Resuming, an MCU the library needs (`target`), past where the decoder stands: the state
/// is taken from the last resume point after that and at or before the target, if any, and
/// the MCUs between are decoded.
[[gnu::noinline]] void CatchUp(j_decompress_ptr cinfo, Core& c, uint64_t target) {
  const auto after = std::upper_bound(c.resume->begin(), c.resume->end(), target,
                                      [](uint64_t m, const ResumePoint& p) { return m < p.mcu; });
  const ResumePoint* best = after == c.resume->begin() ? nullptr : &*std::prev(after);
  if (best != nullptr && best->mcu > c.mcu) {
    ReadFrom(c, c.scan_begin + best->offset);
    Bits r = RefillSlow(c, Bits{c.acc, c.bits, c.pos});
    if (r.bits - c.pad < best->bit) Bail(cinfo, c);
    r.acc <<= best->bit;
    r.bits -= best->bit;
    c.acc = r.acc;
    c.bits = r.bits;
    c.pos = r.pos;
    for (int i = 0; i < MAX_COMPS_IN_SCAN; ++i) c.last_dc[i] = best->dc[i];
    c.restarts_to_go = best->restarts_to_go;
    c.next_restart = best->next_restart;
    c.mcu = best->mcu;
    c.resumed = true;
  }
  while (c.mcu < target) DecodeNext(cinfo, c, nullptr);
}

boolean DecodeMcu(j_decompress_ptr cinfo, JBLOCKROW* data) {
  Core& c = *reinterpret_cast<Core*>(cinfo->entropy);
  if (__builtin_expect(c.deferring, 0)) {
    // Only the MCUs the library needs, and the scan's last (its end is checked), are decoded;
    // the library's coefficient buffer for the others stays as it gave it (zero).
    const uint64_t m = c.call++;
    if (m + 1 < c.total_mcus) {
      if (data == nullptr) return TRUE;
      const uint64_t col = m % c.mcus_per_row;
      if (col < c.first_col || col > c.last_col) return TRUE;
    }
    if (c.mcu < m) CatchUp(cinfo, c, m);
  }
  DecodeNext(cinfo, c, data);
  return TRUE;
}

void StartPass(j_decompress_ptr cinfo) {
  // A scan after the first: never, for the files it takes (one scan).
  Bail(cinfo, *reinterpret_cast<Core*>(cinfo->entropy));
}

// ---- Progressive scans (InstallProgressive): jdphuff.c's four decoders, coefficient for
// coefficient, with this file's tables and bit reader.

/// One progressive MCU: the restart before it, `body` on the reader, the end after it.
template <typename Body>
[[gnu::always_inline]] inline boolean ProgressiveMcu(j_decompress_ptr cinfo, Body&& body) {
  Core& c = *reinterpret_cast<Core*>(cinfo->entropy);
  if (c.restart_interval != 0 && c.restarts_to_go == 0) Restart(cinfo, c);
  Bits r{c.acc, c.bits, c.pos};
  body(c, r);
  EndMcu(cinfo, c, r);
  return TRUE;
}

/// A refinement bit for a coefficient already non-zero: its magnitude grows by the bit.
inline void Refine(Core& c, Bits& r, JCOEF* coef, int p1, int m1) {
  Refill(c, r);
  if (TakeBits(r, 1) != 0 && (*coef & p1) == 0) {
    *coef = static_cast<JCOEF>(*coef + (*coef >= 0 ? p1 : m1));
  }
}

boolean DecodeDcFirst(j_decompress_ptr cinfo, JBLOCKROW* data) {
  return ProgressiveMcu(cinfo, [&](Core& c, Bits& r) {
    for (int b = 0; b < c.blocks; ++b) {
      const Core::Block& blk = c.block[b];
      Refill(c, r);
      int s = DecodeSymbol(cinfo, c, *blk.dc, r);
      if (s != 0) s = Extend(TakeBits(r, s), s);
      int& last = c.last_dc[blk.comp];
      // The library refuses a DC value past int's range (JERR_BAD_DCT_COEF): its own decode
      // gives that verdict.
      if (__builtin_add_overflow(last, s, &last)) Bail(cinfo, c);
      data[b][0][0] = AtBit(last, c.al);
    }
  });
}

boolean DecodeDcRefine(j_decompress_ptr cinfo, JBLOCKROW* data) {
  return ProgressiveMcu(cinfo, [&](Core& c, Bits& r) {
    const int p1 = 1 << c.al;
    for (int b = 0; b < c.blocks; ++b) {
      Refill(c, r);
      if (TakeBits(r, 1) != 0) data[b][0][0] = static_cast<JCOEF>(data[b][0][0] | p1);
    }
  });
}

boolean DecodeAcFirst(j_decompress_ptr cinfo, JBLOCKROW* data) {
  return ProgressiveMcu(cinfo, [&](Core& c, Bits& r) {
    if (c.eobrun > 0) {  // a block of the band's end-of-band run: nothing coded
      --c.eobrun;
      return;
    }
    JCOEF* block = data[0][0];
    const HuffTable& t = *c.band;
    const int se = c.se;
    const int al = c.al;
    for (int k = c.ss; k <= se;) {
      Refill(c, r);
      if (FastAcRun<true>(t, r, k, se, block, al)) continue;
      const int rs = DecodeSymbol(cinfo, c, t, r);
      const int size = rs & 15;
      const int run = rs >> 4;
      if (size != 0) {
        k += run;
        block[kNatural[k]] = AtBit(Extend(TakeBits(r, size), size), al);
        ++k;
      } else if (run == 15) {  // sixteen zeros
        k += 16;
      } else {  // end of band here and in the next 2^run - 1 + (run bits) blocks
        c.eobrun = (1u << run) - 1;
        if (run != 0) c.eobrun += static_cast<unsigned>(TakeBits(r, run));
        break;
      }
    }
  });
}

boolean DecodeAcRefine(j_decompress_ptr cinfo, JBLOCKROW* data) {
  return ProgressiveMcu(cinfo, [&](Core& c, Bits& r) {
    JCOEF* block = data[0][0];
    const HuffTable& t = *c.band;
    const int se = c.se;
    const int p1 = 1 << c.al;
    const int m1 = static_cast<int>(~0u << c.al);
    int k = c.ss;
    if (c.eobrun == 0) {
      for (; k <= se; ++k) {
        Refill(c, r);
        const int rs = DecodeSymbol(cinfo, c, t, r);
        int run = rs >> 4;
        int value = 0;  // a coefficient that becomes non-zero in this scan
        if ((rs & 15) != 0) {
          // Its size is always 1; the library warns of anything else (its decode judges).
          if ((rs & 15) != 1) Bail(cinfo, c);
          value = TakeBits(r, 1) != 0 ? p1 : m1;
        } else if (run != 15) {  // end of band, the rest of this block refined below
          c.eobrun = 1u << run;
          if (run != 0) c.eobrun += static_cast<unsigned>(TakeBits(r, run));
          break;
        }
        // Past `run` zero coefficients, refining the non-zero ones met on the way.
        do {
          JCOEF* coef = block + kNatural[k];
          if (*coef != 0) {
            Refine(c, r, coef, p1, m1);
          } else if (--run < 0) {
            break;
          }
          ++k;
        } while (k <= se);
        if (value != 0) block[kNatural[k]] = static_cast<JCOEF>(value);
      }
    }
    if (c.eobrun > 0) {  // in an end-of-band run: only the non-zero coefficients are refined
      for (; k <= se; ++k) {
        JCOEF* coef = block + kNatural[k];
        if (*coef != 0) Refine(c, r, coef, p1, m1);
      }
      --c.eobrun;
    }
  });
}

/// The state at the start of the scan the library has just started: the reader at the
/// source's next byte, DC predictions, restart count, MCU count; no resume points.
void StartScan(j_decompress_ptr cinfo, Core& c) {
  const jpeg_source_mgr* src = cinfo->src;
  ReadFrom(c, src->next_input_byte);
  c.end = src->next_input_byte + src->bytes_in_buffer;
  c.at_marker = cinfo->unread_marker != 0;
  for (int& dc : c.last_dc) dc = 0;
  c.restart_interval = cinfo->restart_interval;
  c.restarts_to_go = cinfo->restart_interval;
  c.next_restart = 0;
  c.mcu = 0;
  c.total_mcus = uint64_t{cinfo->MCUs_per_row} * cinfo->MCU_rows_in_scan;
  c.mcus_per_row = std::max<JDIMENSION>(1, cinfo->MCUs_per_row);
  c.scan_begin = c.pos;
  c.next_point = ~uint64_t{0};
  c.point_cols = 1;
  c.point_rows = 1;
  c.recording = nullptr;
  c.resume = nullptr;
  c.deferring = false;
  c.call = 0;
  c.first_col = 0;
  c.last_col = ~uint64_t{0};
  c.resumed = false;
}

/// Takes the scan the library has just started (its start_pass has checked it): tables, band
/// and reader. False for tables it cannot take.
bool SetUpScan(j_decompress_ptr cinfo, Core& c) {
  const bool refine = cinfo->Ah != 0;
  if (cinfo->Ss == 0) {
    if (cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU) return false;
    c.blocks = cinfo->blocks_in_MCU;
    for (int b = 0; b < c.blocks; ++b) {
      const int ci = cinfo->MCU_membership[b];
      const int tbl = cinfo->cur_comp_info[ci]->dc_tbl_no;
      Core::Block& blk = c.block[b];
      blk.comp = ci;
      if (refine) continue;  // a DC refinement reads bits, no codes
      if (tbl < 0 || tbl >= NUM_HUFF_TBLS ||
          !Derive(cinfo->dc_huff_tbl_ptrs[tbl], false, &c.dc_tables[tbl])) {
        return false;
      }
      blk.dc = &c.dc_tables[tbl];
    }
    c.pub.decode_mcu = refine ? DecodeDcRefine : DecodeDcFirst;
  } else {
    if (cinfo->comps_in_scan != 1) return false;  // refused by the library's start_pass too
    const int tbl = cinfo->cur_comp_info[0]->ac_tbl_no;
    if (tbl < 0 || tbl >= NUM_HUFF_TBLS ||
        !Derive(cinfo->ac_huff_tbl_ptrs[tbl], true, &c.ac_tables[tbl])) {
      return false;
    }
    c.band = &c.ac_tables[tbl];
    c.pub.decode_mcu = refine ? DecodeAcRefine : DecodeAcFirst;
  }
  c.ss = cinfo->Ss;
  c.se = cinfo->Se;
  c.al = cinfo->Al;
  c.eobrun = 0;
  StartScan(cinfo, c);
  return true;
}

/// A progressive file's next scan: the library's start_pass checks it (its warnings and
/// errors as always), then this decoder takes it, or the library keeps it and the rest.
void ProgressiveStartPass(j_decompress_ptr cinfo) {
  Core& c = *reinterpret_cast<Core*>(cinfo->entropy);
  cinfo->entropy = reinterpret_cast<jpeg_entropy_decoder*>(c.library);
  c.library->start_pass(cinfo);
  if (SetUpScan(cinfo, c)) cinfo->entropy = reinterpret_cast<jpeg_entropy_decoder*>(&c);
}

}  // namespace

bool BaselineEntropy::Install(j_decompress_ptr cinfo) {
  Core& c = core_;
  c.bailed = false;
  c.resumed = false;
  if (cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8) return false;
  if (jpeg_has_multiple_scans(cinfo)) return false;
  if (cinfo->comps_in_scan != cinfo->num_components || cinfo->input_iMCU_row != 0) return false;
  if (cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU || cinfo->Ss != 0 || cinfo->Se != DCTSIZE2 - 1 ||
      cinfo->Ah != 0 || cinfo->Al != 0) {
    return false;
  }
  bool derived_dc[NUM_HUFF_TBLS] = {};
  bool derived_ac[NUM_HUFF_TBLS] = {};
  for (int ci = 0; ci < cinfo->comps_in_scan; ++ci) {
    const jpeg_component_info* comp = cinfo->cur_comp_info[ci];
    const int dc = comp->dc_tbl_no;
    const int ac = comp->ac_tbl_no;
    if (dc < 0 || dc >= NUM_HUFF_TBLS || ac < 0 || ac >= NUM_HUFF_TBLS) return false;
    if (!derived_dc[dc] && !Derive(cinfo->dc_huff_tbl_ptrs[dc], false, &c.dc_tables[dc])) {
      return false;
    }
    if (!derived_ac[ac] && !Derive(cinfo->ac_huff_tbl_ptrs[ac], true, &c.ac_tables[ac])) {
      return false;
    }
    derived_dc[dc] = derived_ac[ac] = true;
  }
  c.blocks = cinfo->blocks_in_MCU;
  for (int b = 0; b < c.blocks; ++b) {
    const int ci = cinfo->MCU_membership[b];
    const jpeg_component_info* comp = cinfo->cur_comp_info[ci];
    Core::Block& blk = c.block[b];
    blk.dc = &c.dc_tables[comp->dc_tbl_no];
    blk.ac = &c.ac_tables[comp->ac_tbl_no];
    blk.comp = ci;
    // As libjpeg's start_pass_huff_decoder: an unneeded component's values are not kept, and
    // a 1/8-scaled one needs its DC alone.
    blk.dc_needed = comp->component_needed;
    blk.ac_needed = comp->component_needed && comp->DCT_scaled_size > 1;
  }
  StartScan(cinfo, c);
  c.pub.start_pass = StartPass;
  c.pub.decode_mcu = DecodeMcu;
  c.pub.insufficient_data = FALSE;
  cinfo->entropy = reinterpret_cast<jpeg_entropy_decoder*>(&c);
  return true;
}

bool BaselineEntropy::InstallProgressive(j_decompress_ptr cinfo) {
  Core& c = core_;
  c.bailed = false;
  c.resumed = false;
  if (!cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8) return false;
  if (cinfo->entropy == nullptr || cinfo->input_scan_number != 1 || cinfo->input_iMCU_row != 0) {
    return false;
  }
  if (!SetUpScan(cinfo, c)) return false;
  c.library = reinterpret_cast<EntropyInterface*>(cinfo->entropy);
  c.pub.start_pass = ProgressiveStartPass;
  c.pub.insufficient_data = FALSE;
  cinfo->entropy = reinterpret_cast<jpeg_entropy_decoder*>(&c);
  return true;
}

void ProgressiveMonitor::Monitor(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const auto dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  auto* self = reinterpret_cast<ProgressiveMonitor*>(dinfo->progress);
  if (self->pending) {
    self->pending = false;
    self->installed = self->entropy->InstallProgressive(dinfo);
  }
  if (self->then != nullptr) self->then(cinfo);
}

void BaselineEntropy::Record(std::vector<ResumePoint>* points) {
  Core& c = core_;
  points->clear();
  StartRecording(c, points, 0);
}

void BaselineEntropy::Resume(std::vector<ResumePoint>* points, uint64_t first_col, uint64_t last_col) {
  Core& c = core_;
  uint32_t last = 0;
  for (const ResumePoint& p : *points) {
    // Points of another scan (cannot be, by fingerprint and size): not used.
    if (p.mcu <= last || p.mcu >= c.total_mcus || p.offset >= c.end - c.scan_begin || p.bit > 7) return;
    last = p.mcu;
  }
  if (points->empty()) return;
  c.resume = points;
  c.deferring = true;
  c.call = c.mcu;
  c.first_col = first_col;
  c.last_col = last_col;
  // Past the last point every MCU is decoded in turn (no point to jump to): the points of
  // a decode that stopped after its crop are continued there.
  StartRecording(c, points, points->back().mcu);
}

void CropColumns(j_decompress_ptr cinfo, JDIMENSION xoffset, uint64_t* first, uint64_t* last) {
#if JPEG_LIB_VERSION >= 70
  const uint64_t dct = static_cast<uint64_t>(cinfo->min_DCT_h_scaled_size);
#else
  const uint64_t dct = static_cast<uint64_t>(cinfo->min_DCT_scaled_size);
#endif
  // As jpeg_crop_scanline: a single-component file's MCU is one block, others' an iMCU.
  const uint64_t align = dct * (cinfo->comps_in_scan == 1 && cinfo->num_components == 1
                                    ? 1
                                    : static_cast<uint64_t>(cinfo->max_h_samp_factor));
  *first = xoffset / align;
  *last = (xoffset + uint64_t{cinfo->output_width} + align - 1) / align - 1;
}

ScanIndex& ScanIndex::ProcessWide() {
  static ScanIndex* index = [] {
    const char* v = std::getenv("RINGLOADER_SCAN_INDEX_MB");
    const uint64_t mb = v != nullptr ? std::strtoull(v, nullptr, 10) : 64;
    return new ScanIndex(mb << 20);  // never destroyed: decode threads may outlive statics
  }();
  return *index;
}

bool ScanIndex::Find(uint64_t fingerprint, uint64_t size, std::vector<ResumePoint>* points) const {
  std::shared_lock lock(mu_);
  auto it = map_.find(fingerprint);
  if (it == map_.end() || it->second.size != size) return false;
  *points = it->second.points;
  return true;
}

bool ScanIndex::Add(uint64_t fingerprint, uint64_t size, const std::vector<ResumePoint>& all) {
  if (all.empty()) return false;
  std::unique_lock lock(mu_);
  std::vector<ResumePoint> thin;
  if (all.size() > kThinPoints && bytes_ + 64 + all.size() * sizeof(ResumePoint) > limit_ / 2) {
    for (size_t k = 1; k <= kThinPoints; ++k) thin.push_back(all[k * all.size() / (kThinPoints + 1)]);
  }
  const std::vector<ResumePoint>& points = thin.empty() ? all : thin;
  // A map node, its key and the vector's header, besides the points.
  const uint64_t cost = 64 + points.size() * sizeof(ResumePoint);
  auto it = map_.find(fingerprint);
  if (it != map_.end()) {
    // A decode that stopped after its crop recorded the points above it: more replace fewer.
    if (it->second.size != size || it->second.points.size() >= points.size()) return false;
    if (bytes_ + (points.size() - it->second.points.size()) * sizeof(ResumePoint) > limit_) return false;
    bytes_ -= 64 + it->second.points.size() * sizeof(ResumePoint);
    bytes_ += cost;
    it->second.points = points;
    return true;
  }
  if (bytes_ + cost > limit_) return false;
  map_.emplace(fingerprint, Entry{size, points});
  bytes_ += cost;
  return true;
}

uint64_t ScanIndex::bytes() const {
  std::shared_lock lock(mu_);
  return bytes_;
}

uint64_t ScanIndex::scans() const {
  std::shared_lock lock(mu_);
  return map_.size();
}

}  // namespace ringloader::decode_internal

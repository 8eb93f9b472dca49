#include "dataset/webdataset.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_util.h"
#include "dataset/tar.h"
#include "io/child_process.h"

namespace ringloader {
namespace {

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A scanner over one JSON text: enough to find a top-level integer field and skip every other
// value correctly (strings with escapes, nested containers).
class JsonScanner {
 public:
  explicit JsonScanner(const std::string& text) : s_(text) {}

  absl::StatusOr<int64_t> Field(const std::string& field) {
    SkipSpace();
    if (!Eat('{')) return Bad("not a JSON object");
    bool found = false;
    bool is_integer = false;
    int64_t value = 0;
    SkipSpace();
    if (!Eat('}')) {
      while (true) {
        SkipSpace();
        std::string key;
        RL_RETURN_IF_ERROR(String(&key));
        SkipSpace();
        if (!Eat(':')) return Bad("expected ':'");
        SkipSpace();
        if (key == field) {
          found = true;
          const size_t start = p_;
          RL_RETURN_IF_ERROR(Value(0));
          is_integer = ParseInteger(s_.substr(start, p_ - start), &value);
        } else {
          RL_RETURN_IF_ERROR(Value(0));
        }
        SkipSpace();
        if (Eat(',')) continue;
        if (Eat('}')) break;
        return Bad("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (p_ != s_.size()) return Bad("extra data after the object");
    if (!found) return absl::NotFoundError(absl::StrCat("no field '", field, "'"));
    if (!is_integer) return absl::InvalidArgumentError(absl::StrCat("field '", field, "' is not an integer"));
    return value;
  }

 private:
  absl::Status Bad(absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON at byte ", p_, ": ", why));
  }
  void SkipSpace() {
    while (p_ < s_.size() && IsJsonSpace(s_[p_])) ++p_;
  }
  bool Eat(char c) {
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  absl::StatusOr<uint32_t> Hex4() {
    if (p_ + 4 > s_.size()) return Bad("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = Hex(s_[p_ + i]);
      if (h < 0) return Bad("bad \\u escape");
      v = v * 16 + static_cast<uint32_t>(h);
    }
    p_ += 4;
    return v;
  }
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  // A string (at '"'), decoded into `out`.
  absl::Status String(std::string* out) {
    if (!Eat('"')) return Bad("expected a string");
    while (true) {
      if (p_ >= s_.size()) return Bad("unterminated string");
      const char c = s_[p_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Bad("control character in a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (p_ >= s_.size()) return Bad("unterminated escape");
      const char e = s_[p_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          RL_ASSIGN_OR_RETURN(uint32_t cp, Hex4());
          if (cp >= 0xD800 && cp < 0xDC00 && p_ + 1 < s_.size() && s_[p_] == '\\' && s_[p_ + 1] == 'u') {
            const size_t save = p_;
            p_ += 2;
            RL_ASSIGN_OR_RETURN(uint32_t low, Hex4());
            if (low >= 0xDC00 && low < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else {
              p_ = save;
            }
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Bad("bad escape");
      }
    }
  }
  absl::Status Number() {
    Eat('-');
    if (p_ >= s_.size() || !(s_[p_] >= '0' && s_[p_] <= '9')) return Bad("bad number");
    while (p_ < s_.size() && ((s_[p_] >= '0' && s_[p_] <= '9') || s_[p_] == '.' || s_[p_] == 'e' ||
                              s_[p_] == 'E' || s_[p_] == '+' || s_[p_] == '-')) {
      ++p_;
    }
    return absl::OkStatus();
  }
  absl::Status Literal(absl::string_view word) {
    if (s_.compare(p_, word.size(), word.data(), word.size()) != 0) return Bad("unexpected character");
    p_ += word.size();
    return absl::OkStatus();
  }
  absl::Status Value(int depth) {
    if (depth > 256) return Bad("nested too deeply");
    if (p_ >= s_.size()) return Bad("unexpected end");
    const char c = s_[p_];
    if (c == '"') {
      std::string ignored;
      return String(&ignored);
    }
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++p_;
      SkipSpace();
      if (Eat(close)) return absl::OkStatus();
      while (true) {
        SkipSpace();
        if (c == '{') {
          std::string ignored;
          RL_RETURN_IF_ERROR(String(&ignored));
          SkipSpace();
          if (!Eat(':')) return Bad("expected ':'");
          SkipSpace();
        }
        RL_RETURN_IF_ERROR(Value(depth + 1));
        SkipSpace();
        if (Eat(',')) continue;
        if (Eat(close)) return absl::OkStatus();
        return Bad("expected ',' or a closing bracket");
      }
    }
    if (c == 't') return Literal("true");
    if (c == 'f') return Literal("false");
    if (c == 'n') return Literal("null");
    return Number();
  }
  // An integer literal: optional '-', digits, nothing else; fits int64.
  static bool ParseInteger(const std::string& text, int64_t* value) {
    size_t i = 0;
    const bool negative = !text.empty() && text[0] == '-';
    if (negative) ++i;
    if (i >= text.size()) return false;
    uint64_t v = 0;
    for (; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      if (v > (uint64_t{1} << 63) / 10) return false;
      v = v * 10 + static_cast<uint64_t>(text[i] - '0');
    }
    if (v > (negative ? (uint64_t{1} << 63) : (uint64_t{1} << 63) - 1)) return false;
    *value = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
    return true;
  }

  const std::string& s_;
  size_t p_ = 0;
};

// Reads a pipe: command's stdout, in large reads.
class PipeByteSource final : public ByteSource {
 public:
  explicit PipeByteSource(ChildProcess* child) : child_(child), buf_(size_t{256} << 10) {}
  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) override {
    if (pos_ == len_) {
      if (n >= buf_.size()) return child_->Read(dst, n);
      RL_ASSIGN_OR_RETURN(len_, child_->Read(buf_.data(), buf_.size()));
      pos_ = 0;
      if (len_ == 0) return 0;
    }
    const size_t take = std::min(n, len_ - pos_);
    std::memcpy(dst, buf_.data() + pos_, take);
    pos_ += take;
    return take;
  }

 private:
  ChildProcess* child_;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0, len_ = 0;
};

// A sample being assembled from consecutive members with one key.
struct Group {
  std::string key;
  bool open = false;
  std::vector<TarMember> images;  // per image_exts entry; name empty when absent
  bool has_label = false;
  std::string label_error;
  int64_t label = -1;
  std::string duplicate;          // an extension seen twice
  std::string video;              // its first video member (.mp4/.mkv/.webm/.avi/.mov), if any
};

bool IsVideoExt(const std::string& ext) {
  return ext == "mp4" || ext == "mkv" || ext == "webm" || ext == "avi" || ext == "mov";
}

}  // namespace

bool SplitMemberName(const std::string& name, std::string* key, std::string* ext) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  if (base >= name.size() || name[base] == '.') return false;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos) return false;
  // Top-level metadata entries (`__info__`) are not samples.
  if (slash == std::string::npos && name.size() >= 4 && name.compare(0, 2, "__") == 0 &&
      name.compare(name.size() - 2, 2, "__") == 0) {
    return false;
  }
  *key = name.substr(0, dot);
  *ext = absl::AsciiStrToLower(name.substr(dot + 1));
  return true;
}

absl::StatusOr<int64_t> ParseDecimalLabel(const std::string& text) {
  const std::string t(absl::StripAsciiWhitespace(text));
  auto bad = [&] {
    std::string shown = t.size() > 40 ? absl::StrCat(t.substr(0, 40), "...") : t;
    return absl::InvalidArgumentError(absl::StrCat("label '", shown, "' is not an integer"));
  };
  size_t i = 0;
  const bool negative = !t.empty() && t[0] == '-';
  if (!t.empty() && (t[0] == '-' || t[0] == '+')) ++i;
  if (i >= t.size()) return bad();
  uint64_t v = 0;
  for (; i < t.size(); ++i) {
    if (t[i] < '0' || t[i] > '9') return bad();
    if (v > (uint64_t{1} << 63) / 10) return bad();
    v = v * 10 + static_cast<uint64_t>(t[i] - '0');
  }
  if (v > (negative ? (uint64_t{1} << 63) : (uint64_t{1} << 63) - 1)) return bad();
  return negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
}

absl::StatusOr<int64_t> JsonIntegerField(const std::string& text, const std::string& field) {
  return JsonScanner(text).Field(field);
}

absl::StatusOr<ShardIndex> ScanWebDatasetShard(const std::string& url, const WebDatasetOptions& options,
                                               SourceKind kind) {
  if (options.image_exts.empty()) return absl::InvalidArgumentError("image_exts must name at least one extension");
  std::vector<std::string> image_exts;
  for (const std::string& ext : options.image_exts) {
    if (ext.empty() || ext[0] == '.') {
      return absl::InvalidArgumentError(absl::StrCat("image_exts: bad extension '", ext, "' (write 'jpg', not '.jpg')"));
    }
    image_exts.push_back(absl::AsciiStrToLower(ext));
    if (!options.video_members && IsVideoExt(image_exts.back())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image_exts: '", ext, "' is a video extension: rl.WebDataset decodes images; read shards of videos "
          "with rl.VideoShards (their clips batch natively), or rl.VideoFile over the extracted files"));
    }
  }
  const std::string label_key = absl::AsciiStrToLower(options.label_key);
  if (label_key == "json" && options.json_field.empty()) return absl::InvalidArgumentError("json_field must not be empty");
  if (std::find(image_exts.begin(), image_exts.end(), label_key) != image_exts.end()) {
    return absl::InvalidArgumentError(absl::StrCat("label_key '", label_key, "' is also an image extension"));
  }

  std::unique_ptr<ChildProcess> child;
  std::unique_ptr<ByteSource> source;
  const bool is_pipe = kind == SourceKind::kPipe;
  if (is_pipe) {
    RL_RETURN_IF_ERROR(CheckPipePath(url, "shard"));
    RL_ASSIGN_OR_RETURN(child, ChildProcess::Spawn(PipeCommand(url)));
    source = std::make_unique<PipeByteSource>(child.get());
  } else {
    RL_ASSIGN_OR_RETURN(source, FileByteSource::Open(url));
  }

  ShardIndex index;
  index.url = url;
  const std::string exts_text = absl::StrCat(".", absl::StrJoin(image_exts, "/."));
  Group group;
  auto flush = [&] {
    if (!group.open) return;
    ShardSample s;
    s.key = group.key;
    for (const TarMember& m : group.images) {
      if (m.name.empty()) continue;
      s.member = m.name;
      s.offset = m.offset;
      s.length = static_cast<int64_t>(m.size);
      break;
    }
    s.label = group.label;
    if (s.member.empty() && options.video_members) {
      s.error = absl::StrCat(url, ": sample '", group.key, "' has no video member (", exts_text, ")");
    } else if (s.member.empty() && !group.video.empty()) {
      s.error = absl::StrCat(url, ": sample '", group.key, "' has no image member (", exts_text, "); its member '",
                             group.video, "' is a video, which rl.WebDataset does not read: read shards of "
                             "videos with rl.VideoShards (their clips batch natively), or rl.VideoFile over "
                             "the extracted files");
    } else if (s.member.empty()) {
      s.error = absl::StrCat(url, ": sample '", group.key, "' has no image member (", exts_text, ")");
    } else if (!group.duplicate.empty()) {
      s.error = absl::StrCat(url, ": sample '", group.key, "' has more than one '.", group.duplicate, "' member");
    } else if (!label_key.empty() && !group.label_error.empty()) {
      s.error = group.label_error;
    } else if (!label_key.empty() && !group.has_label) {
      s.error = absl::StrCat(url, ": sample '", group.key, "' has no .", label_key, " member");
    }
    if (!s.error.empty()) s.label = -1;
    index.samples.push_back(std::move(s));
    group = Group();
  };

  TarReader reader(source.get());
  TarMember member;
  absl::Status failure;
  while (true) {
    absl::StatusOr<bool> next = reader.Next(&member);
    if (!next.ok()) {
      failure = next.status();
      if (reader.last_member_truncated() && group.open) {
        // The member returned last has no (whole) data: forget it.
        for (TarMember& m : group.images) {
          if (!m.name.empty() && m.name == member.name && m.offset == member.offset) m = TarMember();
        }
      }
      break;
    }
    if (!*next) break;
    std::string key, ext;
    if (!SplitMemberName(member.name, &key, &ext)) continue;
    if (!group.open || key != group.key) {
      flush();
      group.open = true;
      group.key = key;
      group.images.assign(image_exts.size(), TarMember());
    }
    const auto image = std::find(image_exts.begin(), image_exts.end(), ext);
    if (image == image_exts.end() && group.video.empty() && IsVideoExt(ext)) group.video = member.name;
    if (image != image_exts.end()) {
      TarMember& slot = group.images[static_cast<size_t>(image - image_exts.begin())];
      if (!slot.name.empty()) {
        group.duplicate = ext;
      } else {
        slot = member;
      }
      continue;
    }
    if (label_key.empty() || ext != label_key) continue;
    if (group.has_label) {
      group.duplicate = ext;
      continue;
    }
    group.has_label = true;
    const std::string where = absl::StrCat(url, ": member '", member.name, "'");
    std::string data;
    absl::Status read = reader.ReadData(kMaxLabelBytes, &data);
    if (absl::IsOutOfRange(read)) {
      group.label_error = absl::StrCat(where, " is ", member.size, " bytes, over the ", kMaxLabelBytes >> 10,
                                       " KiB limit for a label");
      continue;
    }
    if (!read.ok()) {
      group.has_label = false;  // its data is cut off: the sample has no (whole) label
      failure = read;
      break;
    }
    absl::StatusOr<int64_t> label =
        label_key == "json" ? JsonIntegerField(data, options.json_field) : ParseDecimalLabel(data);
    if (label.ok()) {
      group.label = *label;
    } else {
      group.label_error = absl::StrCat(where, ": ", label.status().message());
    }
  }
  flush();
  if (!failure.ok()) index.error = absl::StrCat(url, ": ", failure.message());
  if (child) {
    if (failure.ok()) {
      // Read to the end (the record padding after the end-of-archive blocks) so the command's
      // exit status tells whether it succeeded.
      absl::StatusOr<uint64_t> rest = source->Skip(~uint64_t{0});
      if (!rest.ok() && index.error.empty()) index.error = absl::StrCat(url, ": ", rest.status().message());
    } else if (!absl::IsDataLoss(failure) || failure.message().find("truncated") == std::string::npos) {
      child->Kill();  // stopped early at a corrupt header: the rest is not wanted
    }
    const int code = child->Wait();
    index.bytes = child->bytes_read();
    if (code != 0 && !(failure.ok() ? false : code == 128 + 9)) {
      const std::string exit = absl::StrCat(url, " exited with status ", code);
      index.error = index.error.empty() ? exit : absl::StrCat(index.error, "; ", exit);
    }
  } else {
    index.bytes = std::max(reader.position(), static_cast<const FileByteSource*>(source.get())->size());
    if (!failure.ok()) index.bytes = reader.position();
  }
  return index;
}

}  // namespace ringloader

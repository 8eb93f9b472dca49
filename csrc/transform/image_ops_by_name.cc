// ApplyImageOpForTesting: one image operation of image_ops.h called by name with named
// arguments, for the Python parity tests (through the binding) and the C++ tests. Its own
// file: the argument reading is the tests' concern, the operations are image_ops.cc's.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transform/image_ops.h"

namespace ringloader {

namespace {

// Reads the named arguments of one ApplyImageOpForTesting call, recording the first problem.
class OpArgs {
 public:
  OpArgs(const std::string& op, const std::map<std::string, std::vector<double>>& args)
      : op_(op), args_(args) {}

  // The `count` values of argument `key` (all of them when count is 0); empty on error.
  const std::vector<double>* Values(const char* key, size_t count) {
    auto it = args_.find(key);
    if (it == args_.end() || (count && it->second.size() != count) || it->second.empty()) {
      Fail(absl::StrCat(op_, ": argument '", key, "' needs ", count ? count : 1, " value(s)"));
      return nullptr;
    }
    return &it->second;
  }
  double Scalar(const char* key) {
    const std::vector<double>* v = Values(key, 1);
    return v ? (*v)[0] : 0.0;
  }
  bool Has(const char* key) const { return args_.count(key) != 0; }
  // A transform filter Pillow's Image.transform accepts.
  Interpolation TransformFilter() {
    const int id = static_cast<int>(Scalar("interpolation"));
    if (id != static_cast<int>(Interpolation::kNearest) && id != static_cast<int>(Interpolation::kBilinear) &&
        id != static_cast<int>(Interpolation::kBicubic)) {
      Fail(absl::StrCat(op_, ": interpolation must be 0 (nearest), 2 (bilinear) or 3 (bicubic)"));
    }
    return static_cast<Interpolation>(id);
  }
  // `fill` as three levels (one value is repeated, as torchvision's _parse_fill does).
  void Fill(uint8_t fill[3]) {
    const std::vector<double>* v = Values("fill", 0);
    if (!v) return;
    if (v->size() != 1 && v->size() != 3) Fail(absl::StrCat(op_, ": fill needs 1 or 3 values"));
    for (int c = 0; c < 3; ++c) fill[c] = static_cast<uint8_t>(std::clamp(static_cast<int>((*v)[v->size() == 3 ? c : 0]), 0, 255));
  }
  void Fail(std::string message) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(std::move(message));
  }
  const absl::Status& status() const { return status_; }

 private:
  const std::string& op_;
  const std::map<std::string, std::vector<double>>& args_;
  absl::Status status_;
};

}  // namespace

absl::Status ApplyImageOpForTesting(const std::string& name,
                                    const std::map<std::string, std::vector<double>>& args,
                                    std::vector<uint8_t>* image, int* width, int* height) {
  if (*width < 0 || *height < 0 || image->size() != static_cast<size_t>(*width) * *height * 3) {
    return absl::InvalidArgumentError("image size does not match width x height x 3");
  }
  RgbView img{image->data(), *width, *height, static_cast<size_t>(*width) * 3};
  ImageOpScratch scratch;
  OpArgs a(name, args);
  uint8_t fill[3] = {0, 0, 0};

  const size_t colon = name.find(':');
  if (colon != std::string::npos) {
    const std::string family = name.substr(0, colon);
    const std::string_view op_name = std::string_view(name).substr(colon + 1);
    AugOp op = AugOp::kIdentity;
    if (!AugOpFromName(op_name, &op) || (family != "ApplyAugOp" && family != "ApplyTimmOp")) {
      return absl::InvalidArgumentError(absl::StrCat("unknown image operation '", name, "'"));
    }
    const bool timm = family == "ApplyTimmOp";
    const double value = a.Scalar(timm ? "arg" : "magnitude");
    const Interpolation interpolation = a.TransformFilter();
    a.Fill(fill);
    if (!a.status().ok()) return a.status();
    if (timm) {
      ApplyTimmOp(op, value, interpolation, fill, img, scratch);
    } else {
      ApplyAugOp(op, value, interpolation, fill, img, scratch);
    }
    return absl::OkStatus();
  }

  if (name == "AdjustBrightness" || name == "AdjustContrast" || name == "AdjustSaturation" ||
      name == "AdjustSharpness") {
    const double factor = a.Scalar("factor");
    if (!a.status().ok()) return a.status();
    if (name == "AdjustBrightness") AdjustBrightness(img, factor);
    if (name == "AdjustContrast") AdjustContrast(img, factor);
    if (name == "AdjustSaturation") AdjustSaturation(img, factor);
    if (name == "AdjustSharpness") AdjustSharpness(img, factor, scratch);
  } else if (name == "AdjustHue") {
    const double hue_factor = a.Scalar("hue_factor");
    if (a.status().ok() && !(hue_factor >= -0.5 && hue_factor <= 0.5)) a.Fail("AdjustHue: hue_factor not in [-0.5, 0.5]");
    if (!a.status().ok()) return a.status();
    AdjustHue(img, hue_factor);
  } else if (name == "ToGrayscale") {
    ToGrayscale(img);
  } else if (name == "Posterize") {
    const double bits = a.Scalar("bits");
    if (a.status().ok() && !(bits >= 0 && bits <= 8)) a.Fail("Posterize: bits not in 0..8");
    if (!a.status().ok()) return a.status();
    Posterize(img, static_cast<int>(bits));
  } else if (name == "Solarize") {
    const double threshold = a.Scalar("threshold");
    if (!a.status().ok()) return a.status();
    Solarize(img, threshold);
  } else if (name == "Invert") {
    Invert(img);
  } else if (name == "AutoContrast") {
    AutoContrast(img);
  } else if (name == "Equalize") {
    Equalize(img);
  } else if (name == "SolarizeAdd") {
    const double add = a.Scalar("add"), threshold = a.Scalar("threshold");
    if (!a.status().ok()) return a.status();
    SolarizeAdd(img, static_cast<int>(add), static_cast<int>(threshold));
  } else if (name == "GaussianBlur") {
    const std::vector<double>* kernel = a.Values("kernel", 2);
    const std::vector<double>* sigma = a.Values("sigma", 2);
    if (!a.status().ok()) return a.status();
    const int kw = static_cast<int>((*kernel)[0]), kh = static_cast<int>((*kernel)[1]);
    if (kw <= 0 || kh <= 0 || kw % 2 == 0 || kh % 2 == 0) {
      return absl::InvalidArgumentError("GaussianBlur: kernel sizes must be odd and positive");
    }
    if (!((*sigma)[0] > 0) || !((*sigma)[1] > 0)) {
      return absl::InvalidArgumentError("GaussianBlur: sigma must be positive");
    }
    GaussianBlur(img, kw, kh, (*sigma)[0], (*sigma)[1], scratch);
  } else if (name == "TransformAffine") {
    const std::vector<double>* matrix = a.Values("matrix", 6);
    const Interpolation interpolation = a.TransformFilter();
    a.Fill(fill);
    if (!a.status().ok()) return a.status();
    TransformAffine(img, matrix->data(), interpolation, fill, scratch);
  } else if (name == "Affine" || name == "Rotate") {
    const double angle = a.Scalar("angle");
    const Interpolation interpolation = a.TransformFilter();
    a.Fill(fill);
    const bool has_center = a.Has("center");
    const std::vector<double>* center = has_center ? a.Values("center", 2) : nullptr;
    const double cx = center ? (*center)[0] : 0.0, cy = center ? (*center)[1] : 0.0;
    if (name == "Rotate") {
      if (!a.status().ok()) return a.status();
      Rotate(img, angle, interpolation, fill, has_center, cx, cy, scratch);
    } else {
      const std::vector<double>* translate = a.Values("translate", 2);
      const std::vector<double>* shear = a.Values("shear", 2);
      const double scale = a.Scalar("scale");
      if (a.status().ok() && !(scale > 0)) a.Fail("Affine: scale must be positive");
      if (!a.status().ok()) return a.status();
      Affine(img, angle, (*translate)[0], (*translate)[1], scale, (*shear)[0], (*shear)[1],
             interpolation, fill, has_center, cx, cy, scratch);
    }
  } else if (name == "Pad") {
    const std::vector<double>* padding = a.Values("padding", 4);
    const int mode = static_cast<int>(a.Scalar("mode"));
    a.Fill(fill);
    if (!a.status().ok()) return a.status();
    if (mode < 0 || mode > static_cast<int>(PadMode::kSymmetric)) {
      return absl::InvalidArgumentError("Pad: mode must be 0..3");
    }
    const int left = static_cast<int>((*padding)[0]), top = static_cast<int>((*padding)[1]);
    const int right = static_cast<int>((*padding)[2]), bottom = static_cast<int>((*padding)[3]);
    const int out_w = *width + left + right, out_h = *height + top + bottom;
    const bool crops_all = *width - std::max(-left, 0) - std::max(-right, 0) <= 0 ||
                           *height - std::max(-top, 0) - std::max(-bottom, 0) <= 0;
    if (out_w <= 0 || out_h <= 0 || (mode != 0 && crops_all)) {
      return absl::InvalidArgumentError("Pad: padding leaves no pixels");
    }
    std::vector<uint8_t> padded(static_cast<size_t>(out_w) * out_h * 3);
    Pad(img, left, top, right, bottom, static_cast<PadMode>(mode), fill,
        RgbView{padded.data(), out_w, out_h, static_cast<size_t>(out_w) * 3});
    image->swap(padded);
    *width = out_w;
    *height = out_h;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown image operation '", name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace ringloader

/// libFuzzer target for the transform chain beyond the decoder: TransformPipeline::Create on a
/// fuzzed chain of every step kind with fuzzed parameters (valid or not), then Plan and
/// RenderSample on a fuzzed image of 1..80 pixels a side, as a decode thread runs them.
///
/// Contract checked on every input (a violation aborts, which libFuzzer records):
///  * Create either fails with InvalidArgument or gives a pipeline;
///  * rendering writes exactly OutputBytes(geometry) bytes into an exact-size heap block (a
///    write past it is an ASan report) and nothing depends on what the block held before
///    (rendered twice over different fill patterns);
///  * the same seed gives the same bytes, also through a RenderState already used by other
///    images (no state leaks between samples);
///  * a render error is InvalidArgument (a crop larger than the image), never anything else.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "fuzz_common.h"
#include "transform/augment.h"
#include "transform/image_transform.h"
#include "transform/random.h"
#include "transform/render.h"

namespace ringloader {
namespace {

[[noreturn]] void Finding(const char* what, const absl::Status& status = absl::OkStatus()) {
  fuzz::Finding("recipe_fuzzer", what, status);
}

using Kind = TransformStep::Kind;

constexpr Kind kKinds[] = {
    Kind::kResize,          Kind::kCenterCrop,         Kind::kRandomResizedCrop,
    Kind::kRandomHorizontalFlip, Kind::kRandomVerticalFlip, Kind::kRandomCrop,
    Kind::kPad,             Kind::kColorJitter,        Kind::kGrayscale,
    Kind::kRandomRotation,  Kind::kRandomAffine,       Kind::kGaussianBlur,
    Kind::kAugOp,           Kind::kRandAugment,        Kind::kTrivialAugmentWide,
    Kind::kAutoAugment,     Kind::kTimmRandAugment,    Kind::kToTensor,
    Kind::kNormalize,       Kind::kRandomErasing};

Range FuzzRange(FuzzedDataProvider& in, double scale = 1.0) {
  const double lo = in.ConsumeFloatingPointInRange(-2.0, 2.0);
  return Range{lo * scale, (lo + in.ConsumeFloatingPointInRange(0.0, 2.0)) * scale};
}

std::optional<Range> FuzzOptionalRange(FuzzedDataProvider& in) {
  if (!in.ConsumeBool()) return std::nullopt;
  return FuzzRange(in);
}

/// Fuzzes the parameters of the sizes, probability, filter and padding a kind has.
template <typename P>
void FuzzCommon(FuzzedDataProvider& in, P& k) {
  if constexpr (requires { k.size_h; }) {
    k.size_h = in.ConsumeIntegralInRange(-2, 90);
    k.size_w = in.ConsumeIntegralInRange(-2, 90);
  }
  if constexpr (requires { k.max_size; }) {
    if (in.ConsumeBool()) k.max_size = in.ConsumeIntegralInRange(0, 120);
  }
  if constexpr (requires { k.p; }) k.p = in.ConsumeFloatingPointInRange(-0.1, 1.1);
  if constexpr (requires { k.scale_min; }) {
    k.scale_min = in.ConsumeFloatingPointInRange(0.0, 1.0);
    k.scale_max = in.ConsumeFloatingPointInRange(0.0, 1.2);
  }
  if constexpr (requires { k.interpolation; }) {
    k.interpolation = static_cast<Interpolation>(in.ConsumeIntegralInRange(0, 5));
  }
  if constexpr (requires { k.pad_mode; }) {
    k.pad_mode = static_cast<PadMode>(in.ConsumeIntegralInRange(0, 3));
    for (int& v : k.pad) v = in.ConsumeIntegralInRange(-3, 12);
  }
  if constexpr (requires { k.pad_if_needed; }) k.pad_if_needed = in.ConsumeBool();
  if constexpr (requires { k.fill; }) {
    for (float& v : k.fill) v = in.ConsumeBool() ? 0.f : in.ConsumeFloatingPointInRange(-10.f, 300.f);
  }
}

/// Fuzzes the ranges and the policy parameters a kind has.
template <typename P>
void FuzzOwn(FuzzedDataProvider& in, P& k) {
  if constexpr (requires { k.brightness; }) {
    k.brightness = FuzzOptionalRange(in);
    k.contrast = FuzzOptionalRange(in);
    k.saturation = FuzzOptionalRange(in);
    k.hue = FuzzOptionalRange(in);
  }
  if constexpr (requires { k.degrees; }) {
    k.degrees = FuzzRange(in, 180.0);
    if (in.ConsumeBool()) {
      k.center = std::array<double, 2>{in.ConsumeFloatingPointInRange(-20.0, 100.0),
                                       in.ConsumeFloatingPointInRange(-20.0, 100.0)};
    }
  }
  if constexpr (requires { k.translate; }) {
    k.translate = FuzzOptionalRange(in);
    k.scale = FuzzOptionalRange(in);
    k.shear_x = FuzzOptionalRange(in);
    k.shear_y = FuzzOptionalRange(in);
  }
  if constexpr (requires { k.sigma; }) k.sigma = FuzzRange(in);
  if constexpr (requires { k.aug_op; }) {
    k.aug_op = static_cast<AugOp>(in.ConsumeIntegralInRange(0, static_cast<int>(AugOp::kSolarizeAdd)));
  }
  if constexpr (requires { k.magnitude; }) k.magnitude = in.ConsumeFloatingPointInRange(-2.0, 40.0);
  if constexpr (requires { k.num_ops; }) k.num_ops = in.ConsumeIntegralInRange(-1, 4);
  if constexpr (requires { k.num_bins; }) k.num_bins = in.ConsumeIntegralInRange(0, 40);
  if constexpr (requires { k.policy; }) k.policy = in.ConsumeIntegralInRange(-1, 3);
  if constexpr (requires { k.timm_ops; }) {
    k.timm_op_count = in.ConsumeIntegralInRange(0, 24);
    for (int i = 0; i < k.timm_op_count; ++i) {
      k.timm_ops[i] = in.ConsumeIntegralInRange(0, static_cast<int>(TimmOp::kCount) - 1);
    }
    k.magnitude_std = in.ConsumeFloatingPointInRange(0.0, 3.0);
    k.random_interpolation = in.ConsumeBool();
  }
  if constexpr (requires { k.erase_mode; }) {
    k.scale = FuzzRange(in);
    k.ratio = FuzzRange(in);
    k.erase_mode = in.ConsumeIntegralInRange(0, 2);
    k.timm_erasing = in.ConsumeBool();
    k.erase_count = in.ConsumeIntegralInRange(0, 4);
  }
}

TransformStep FuzzStep(FuzzedDataProvider& in) {
  TransformStep s(in.PickValueInArray(kKinds));
  std::visit(
      [&in](auto& k) {
        FuzzCommon(in, k);
        FuzzOwn(in, k);
      },
      s.params);
  return s;
}

std::vector<uint8_t> Render(const TransformPipeline& p, const std::vector<uint8_t>& pixels, int w,
                            int h, uint64_t seed, uint8_t fill, RenderState& state,
                            absl::Status* status) {
  SampleRng rng(seed);
  const SampleGeometry g = p.Plan(w, h, rng);
  const size_t bytes = p.OutputBytes(g);
  if (p.fixed_size() && bytes != p.SampleBytes() && g.error == nullptr) Finding("output size");
  std::unique_ptr<uint8_t[]> out(new uint8_t[bytes + 1]);  // exact-size block (+1 for 0 bytes)
  std::memset(out.get(), fill, bytes);
  *status = RenderSample(pixels.data(), static_cast<size_t>(w) * 3, 3, w, h, p, g, rng, state,
                         out.get());
  return std::vector<uint8_t>(out.get(), out.get() + bytes);
}

RenderState& SharedState() {
  static RenderState state;  // reused across inputs, as a decode thread reuses its own
  return state;
}

}  // namespace
}  // namespace ringloader

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringloader;
  FuzzedDataProvider in(data, size);
  const int w = in.ConsumeIntegralInRange(1, 80);
  const int h = in.ConsumeIntegralInRange(1, 80);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const DType dtype = static_cast<DType>(in.ConsumeIntegralInRange(0, 3));
  const Layout layout = in.ConsumeBool() ? Layout::kHWC : Layout::kCHW;
  const bool variable = in.ConsumeBool();
  std::vector<TransformStep> steps(in.ConsumeIntegralInRange(0, 6));
  for (TransformStep& s : steps) s = FuzzStep(in);
  std::vector<uint8_t> pixels = in.ConsumeBytes<uint8_t>(static_cast<size_t>(w) * h * 3);
  pixels.resize(static_cast<size_t>(w) * h * 3, 0x5A);

  absl::StatusOr<TransformPipeline> p = TransformPipeline::Create(steps, dtype, layout, variable);
  if (!p.ok()) {
    if (p.status().code() != absl::StatusCode::kInvalidArgument) Finding("Create", p.status());
    return 0;
  }
  // Keep single inputs fast: huge outputs are legal but only slow the search down.
  {
    SampleRng probe(seed);
    if (p->OutputBytes(p->Plan(w, h, probe)) > (size_t{4} << 20)) return 0;
  }
  absl::Status s1, s2, s3;
  RenderState fresh;
  const std::vector<uint8_t> a = Render(*p, pixels, w, h, seed, 0x00, fresh, &s1);
  const std::vector<uint8_t> b = Render(*p, pixels, w, h, seed, 0xFF, SharedState(), &s2);
  if (s1.code() != s2.code()) Finding("same input, different status", s1.ok() ? s2 : s1);
  if (!s1.ok()) {
    if (s1.code() != absl::StatusCode::kInvalidArgument) Finding("render error code", s1);
    return 0;
  }
  if (a != b) Finding("output depends on the destination's old bytes or on earlier samples");
  const std::vector<uint8_t> c = Render(*p, pixels, w, h, seed, 0x33, SharedState(), &s3);
  if (!s3.ok() || a != c) Finding("not deterministic for one seed", s3);
  return 0;
}

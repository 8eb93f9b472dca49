#include "transform/image_ops.h"

#include "absl/strings/str_cat.h"

namespace ringloader {

absl::Status ApplyImageOpForTesting(const std::string& name,
                                    const std::map<std::string, std::vector<double>>& args,
                                    std::vector<uint8_t>* image, int* width, int* height) {
  (void)args, (void)image, (void)width, (void)height;
  return absl::InvalidArgumentError(absl::StrCat("unknown image operation '", name, "'"));
}

}  // namespace ringloader

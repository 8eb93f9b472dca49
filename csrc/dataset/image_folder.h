#pragma once
/// What the image-folder scan counts as an image.

#include <string>
#include <vector>

namespace ringloader {

/// torchvision.datasets.folder.IMG_EXTENSIONS, lower case with the dot (".jpg", ...): the files
/// ScanImageFolder keeps (matched case-insensitively). The Python package's IMG_EXTENSIONS is
/// this list, so the two cannot drift.
const std::vector<std::string>& ImageExtensions();

}  // namespace ringloader

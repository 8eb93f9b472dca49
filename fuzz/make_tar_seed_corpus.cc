/// Writes the tar fuzzer's seed corpus into the directory given as argv[1]: small archives
/// built header by header (ustar with prefix, GNU long name, pax path and size, base-256 size,
/// global header, directory, symlink, labels as cls and json), each preceded by the fuzzer's
/// control byte. Deterministic.

#include <cstdio>
#include <string>

#include "testing/tar_builder.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  using ringloader::testing::TarBuilder;
  const std::string dir = argv[1];
  auto write = [&](const std::string& name, TarBuilder& tar, char control) {
    TarBuilder out;
    out.bytes() = std::string(1, control) + tar.bytes();
    out.Write(dir + "/" + name);
  };
  TarBuilder a;
  a.AddGlobalPax();
  a.AddFile("000001.jpg", std::string(600, 'j'), '0', TarBuilder::Magic::kUstar, "train");
  a.AddFile("000001.cls", " 7\n", '0', TarBuilder::Magic::kUstar, "train");
  a.AddDirectory("train/");
  a.AddGnuLongName(std::string(120, 'n') + "/000002.png", "png bytes");
  a.AddSymlink("link.jpg");
  a.AddPax(std::string(110, 'p') + "/000002.json", R"({"caption": "a \"b\" {c}", "label": -3})", true);
  a.AddFile("big.webp", std::string(3000, 'w'), '0', TarBuilder::Magic::kGnu, "", true);
  a.End();
  write("mixed_read", a, 1);
  write("mixed_skip", a, 2);
  write("mixed_bytewise", a, 0);
  TarBuilder b;
  b.AddFile("k.cls", "12");
  b.AddFile("k.json", R"({"label": [1, {"x": null}], "label": 4})");
  write("labels", b, 3);
  return 0;
}

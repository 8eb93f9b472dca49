#!/usr/bin/env python3
"""Writes each ```cpp block of the given Markdown files (a folder stands for its *.md files) as a translation unit of a small CMake
project built against the installed package (scripts/test_cpp_package.sh compiles it), so the
C++ examples of the docs cannot drift from the headers.

A block with its own `int main` is taken as it is; otherwise its #include lines stay at the top
and the rest becomes the body of `main(argc, argv)`. A block that includes <ringloader/torch.h>
links the torch component. A block preceded by `<!-- not compiled: REASON -->` is left out.

    doc_cpp_blocks.py OUT_DIR FILE.md|FOLDER [FILE.md|FOLDER ...]
"""
import re
import sys
from pathlib import Path

FENCE = re.compile(r"(?:<!--\s*not compiled:\s*(?P<skip>.*?)\s*-->\s*\n)?```cpp\n(?P<code>.*?)```", re.S)


def translation_unit(code: str, where: str) -> str:
    if re.search(r"\bint\s+main\s*\(", code):
        return f"// {where}\n{code}"
    includes = [line for line in code.splitlines() if line.startswith("#include")]
    body = [line for line in code.splitlines() if not line.startswith("#include")]
    return "\n".join([f"// {where}", *includes, "", "int main(int argc, char** argv) {",
                      "  (void)argc; (void)argv;", *("  " + line for line in body), "  return 0;", "}", ""])


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    targets = []
    names = [str(md) for arg in sys.argv[2:]
             for md in (sorted(Path(arg).glob("*.md")) if Path(arg).is_dir() else [Path(arg)])]
    for name in names:
        text = Path(name).read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start("code")) + 1
            if m.group("skip"):
                print(f"{name}:{line}: not compiled ({m.group('skip')})")
                continue
            target = f"doc_block_{len(targets)}"
            (out / f"{target}.cc").write_text(translation_unit(m.group("code"), f"{name}:{line}"))
            targets.append((target, "<ringloader/torch.h>" in m.group("code")))
            print(f"{name}:{line}: {target}.cc")
    if not targets:
        print("no ```cpp blocks found", file=sys.stderr)
        return 1
    lines = ["cmake_minimum_required(VERSION 3.24)", "project(ringloader_doc_blocks LANGUAGES CXX)",
             "set(CMAKE_CXX_STANDARD 20)", "set(CMAKE_CXX_STANDARD_REQUIRED ON)",
             "find_package(ringloader 0.1 CONFIG REQUIRED OPTIONAL_COMPONENTS torch)"]
    for target, torch in targets:
        if torch:
            lines += ["if(ringloader_torch_FOUND)", f"  add_executable({target} {target}.cc)",
                      f"  target_link_libraries({target} PRIVATE ringloader::torch)", "endif()"]
        else:
            lines += [f"add_executable({target} {target}.cc)",
                      f"target_link_libraries({target} PRIVATE ringloader::ringloader)"]
    (out / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

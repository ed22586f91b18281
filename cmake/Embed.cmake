# Turns a kernel source file into a C++ file defining `extern const char <NAME>[]` in namespace
# portmat::kernels, so kernels stay real .cl files (readable, testable with any OpenCL tool) and
# still ship inside the library. Run as: cmake -DIN=... -DOUT=... -DNAME=... -P Embed.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by cmake/Embed.cmake; edit the .cl file instead.\n"
  "namespace portmat::kernels {\n"
  "extern const char ${NAME}[] = {${bytes}0x00};\n"
  "}\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)

// hpsearch schema: prints the JSON Schema of space.json, the file
// search/space.schema.json as it was when the program was built (embedded
// byte for byte by cmake/EmbedFile.cmake).
#include <cstddef>
#include <cstdio>
#include <string_view>

#include "cli/commands.h"

namespace hps::cli {

// Defined in the generated space_schema.cpp (CMakeLists.txt).
extern const unsigned char kSpaceSchema[];
extern const std::size_t kSpaceSchema_size;

std::string_view space_schema() {
  return {reinterpret_cast<const char*>(kSpaceSchema), kSpaceSchema_size};
}

int schema_command() {
  const std::string_view text = space_schema();
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    print_error("schema: cannot write to stdout");
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace hps::cli

# Writes a C++ source file that holds a file's bytes, so a program prints
# exactly the file it was built with (hpsearch schema: search/space.schema.json).
# Run at build time:
#   cmake -DINPUT=FILE -DOUTPUT=FILE.cpp -DNAMESPACE=ns -DSYMBOL=kName -P EmbedFile.cmake
# The source defines `const unsigned char SYMBOL[]` (the bytes, not
# NUL-terminated) and `const std::size_t SYMBOL_size` in NAMESPACE.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
# "0x.., " per byte, 16 bytes a line.
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n  " bytes "${bytes}")
get_filename_component(name "${INPUT}" NAME)
set(text "// Generated from ${name} by cmake/EmbedFile.cmake at build time; do not edit.\n")
string(APPEND text "#include <cstddef>\n\nnamespace ${NAMESPACE} {\n\n")
string(APPEND text "extern const unsigned char ${SYMBOL}[];\nextern const std::size_t ${SYMBOL}_size;\n\n")
string(APPEND text "const unsigned char ${SYMBOL}[] = {\n  ${bytes}\n};\n")
string(APPEND text "const std::size_t ${SYMBOL}_size = ${size};\n\n}  // namespace ${NAMESPACE}\n")
# Rewritten only when it changes, so an unchanged file does not rebuild.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${text}")

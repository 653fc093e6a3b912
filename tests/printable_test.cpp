// Tests of printable() (search/printable.h): text from peers made safe to
// print.
#include "search/printable.h"

#include <gtest/gtest.h>

namespace hps {
namespace {

TEST(Printable, EscapesControlCharactersAndKeepsTheRest) {
  EXPECT_EQ(printable("worker-1:4242"), "worker-1:4242");
  EXPECT_EQ(printable("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(printable("\x1b[2J\x07"), "\\x1b[2J\\x07");
  EXPECT_EQ(printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(printable("csi\xc2\x9b"
                      "31m"),
            "csi\\u009b31m");                                        // U+009B, the one-byte CSI
  EXPECT_EQ(printable("gr\xc3\xbc\xc3\x9f"), "gr\xc3\xbc\xc3\x9f");  // UTF-8 text is kept
}

TEST(Printable, IsIdempotent) {
  for (std::string s : {"a\nb", "\x1b[31mred", "x\\ny", "plain"})
    EXPECT_EQ(printable(printable(s)), printable(s)) << s;
}

}  // namespace
}  // namespace hps

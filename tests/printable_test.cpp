// Tests of printable() (search/printable.h): text from peers made safe to
// print.
#include "search/printable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "search/errors.h"

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

// Characters that show nothing but change how the text around them shows
// (a stored study name holding U+202E prints the rest of the line
// backwards): bidirectional overrides and isolates, zero-width characters
// and the BOM, escaped as \uHHHH; their neighbours are kept.
TEST(Printable, EscapesBidiOverridesAndZeroWidthCharacters) {
  EXPECT_EQ(printable("a\xe2\x80\xae"
                      "b"),
            "a\\u202eb");  // U+202E RIGHT-TO-LEFT OVERRIDE
  EXPECT_EQ(printable("\xe2\x80\xaa\xe2\x80\xac"), "\\u202a\\u202c");
  EXPECT_EQ(printable("\xe2\x81\xa6x\xe2\x81\xa9"), "\\u2066x\\u2069");  // isolates
  EXPECT_EQ(printable("\xe2\x80\x8b\xe2\x80\x8f"), "\\u200b\\u200f");    // ZWSP, RLM
  EXPECT_EQ(printable("\xef\xbb\xbfname"), "\\ufeffname");               // BOM
  // Their neighbours in the same blocks are ordinary text.
  for (const char* kept : {"\xe2\x80\x90", "\xe2\x80\xaf", "\xe2\x81\xa5", "\xe2\x81\xaa",
                           "\xe2\x80\x8a", "\xef\xbb\xbe", "\xe2\x82\xac"})
    EXPECT_EQ(printable(kept), kept);
  EXPECT_EQ(printable(printable("\xe2\x80\xae")), printable("\xe2\x80\xae"));
}

// Bytes that are not UTF-8 (a Latin-1 worker name) become U+FFFD: the
// result can be stored as JSON and printed.
TEST(Printable, ReplacesBytesThatAreNotUtf8) {
  EXPECT_EQ(printable("caf\xe9"), "caf\xEF\xBF\xBD");
  EXPECT_EQ(printable("\xff\xfe"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(printable("\xc3"), "\xEF\xBF\xBD");                  // truncated
  EXPECT_EQ(printable("\xc0\xaf"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(printable("\xc2"), "\xEF\xBF\xBD");                  // a C1 lead byte alone
  EXPECT_EQ(valid_utf8(std::string("a\xff"
                                   "b\0c\n",
                                   6)),
            "a\xEF\xBF\xBD"
            "b\\0c\n");  // NUL as "\0"; lines kept
}

// An error quotes at most kMaxQuotedChars (200) characters of a user's
// text, then its size: the head escaped, a UTF-8 sequence never split, a
// short text whole.
TEST(Printable, ExcerptCutsLongTextAndSaysItsSize) {
  EXPECT_EQ(printable_excerpt("lr\x1b"), "lr\\x1b");
  EXPECT_EQ(printable_excerpt(std::string(200, 'a')), std::string(200, 'a'));
  EXPECT_EQ(printable_excerpt(std::string(201, 'a')),
            std::string(200, 'a') + "... (201 bytes in all)");
  EXPECT_EQ(printable_excerpt(std::string(10 << 20, 'a')),
            std::string(200, 'a') + "... (10485760 bytes in all)");
  std::string umlauts;
  for (int i = 0; i < 300; ++i) umlauts += "\xc3\xbc";
  std::string head;
  for (int i = 0; i < 200; ++i) head += "\xc3\xbc";
  EXPECT_EQ(printable_excerpt(umlauts), head + "... (600 bytes in all)");
  // Controls count as one character each and are escaped.
  EXPECT_EQ(printable_excerpt(std::string(300, '\x1b')).substr(0, 8), "\\x1b\\x1b");
  EXPECT_NE(printable_excerpt(std::string(300, '\x1b')).find("... (300 bytes in all)"),
            std::string::npos);
}

TEST(Printable, IsIdempotent) {
  for (std::string s : {"a\nb", "\x1b[31mred", "x\\ny", "plain", "caf\xe9"})
    EXPECT_EQ(printable(printable(s)), printable(s)) << s;
}

// An error's what() is a C string: a NUL byte from a user's text (a key or
// value of space.json or of a stored document) would end the message there,
// losing the rest of the text and the rule. It is kept as "\x00", as
// printable() writes it.
TEST(Printable, ErrorsKeepTheTextAfterANulByte) {
  const ConfigError key(std::string("sampler.a") + '\0' + "b",
                        "unknown key (did you mean 'seed'?)");
  EXPECT_STREQ(key.what(), "sampler.a\\x00b: unknown key (did you mean 'seed'?)");
  const ConfigError value("sampler.type", std::string("unknown type 'tp") + '\0' + "e'");
  EXPECT_STREQ(value.what(), "sampler.type: unknown type 'tp\\x00e'");
  EXPECT_STREQ(StorageError(std::string("a\0\0b", 4)).what(), "a\\x00\\x00b");
  EXPECT_EQ(printable(value.what()), value.what());  // printed as it is
  EXPECT_STREQ(Error("plain").what(), "plain");
}

// printable_lines: a traceback's line breaks stay real ones, each next line
// indented; "\r\n" is one break; every other control character (a lone CR,
// ESC, BEL) stays escaped, so no program text starts a log line of its own
// or sends an escape sequence.
TEST(Printable, LinesKeepLineBreaksIndentedAndEscapeTheRest) {
  EXPECT_EQ(printable_lines("failed; stderr:\nTraceback:\n  File \"x.py\"\nValueError", "    "),
            "failed; stderr:\n    Traceback:\n      File \"x.py\"\n    ValueError");
  EXPECT_EQ(printable_lines("a\r\nb", "> "), "a\n> b");
  EXPECT_EQ(printable_lines("a\rb\x1b[31m\x07\tc", "  "), "a\\rb\\x1b[31m\\x07\\tc");
  EXPECT_EQ(printable_lines("a\n\x1b]0;T\x07\n", ""), "a\n\\x1b]0;T\\x07\n");
  EXPECT_EQ(printable_lines("one line", "  "), "one line");
  EXPECT_EQ(printable_lines("", "  "), "");
  EXPECT_EQ(printable_lines("bad \xff byte\nnext", " "), "bad \xEF\xBF\xBD byte\n next");
}

// one_line_reason: the first and last non-empty lines of a reason, each cut
// to 150 bytes, printable; "(none given)" for a blank one.
TEST(Printable, OneLineReasonKeepsTheFirstAndLastLines) {
  EXPECT_EQ(one_line_reason("the program failed; stderr:\nTraceback\n  File\nValueError: boom\n"),
            "the program failed; stderr: ... ValueError: boom");
  EXPECT_EQ(one_line_reason("first\r\nlast"), "first last");
  EXPECT_EQ(one_line_reason("only"), "only");
  EXPECT_EQ(one_line_reason(" \n\t\n"), "(none given)");
  EXPECT_EQ(one_line_reason("\x1b[2Jx"), "\\x1b[2Jx");
  EXPECT_EQ(one_line_reason(std::string(200, 'a')),
            std::string(90, 'a') + " ... " + std::string(55, 'a'));
  // The end of a long line (where a hint is) stays.
  const std::string typo = "the metric 'val_los' was never seen on stdout or stderr; " +
                           std::string(150, 'x') + " did you mean 'val_loss'?";
  EXPECT_THAT(one_line_reason(typo), ::testing::EndsWith("did you mean 'val_loss'?"));
  EXPECT_THAT(one_line_reason(typo), ::testing::StartsWith("the metric 'val_los'"));
}

}  // namespace
}  // namespace hps

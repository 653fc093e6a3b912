// How long the randomized and repeated tests run in the ASan/UBSan build.
// That build (clang at -O0 with AddressSanitizer and UndefinedBehaviorSanitizer)
// runs the library 20-50x slower than Release, and the test command has to fit
// 60 minutes on 2 cores: tests that repeat one check over many random writes
// or trials run the same checks on fewer of them there. The Release suite runs
// them at full size; ASan's job (memory errors, undefined behaviour) is done on
// every code path either way.
#pragma once

namespace hps::testsupport {

#if defined(HPSEARCH_TEST_ASAN)
inline constexpr bool kAsanBuild = true;
#else
inline constexpr bool kAsanBuild = false;
#endif

// `release` in every build but the ASan/UBSan one, `asan` there (a count of
// iterations: writes, trials).
constexpr int asan_scaled(int release, int asan) { return kAsanBuild ? asan : release; }

}  // namespace hps::testsupport

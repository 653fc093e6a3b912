// Tests of objectives/idx.h: IDX reading (plain and gzip), Fashion-MNIST
// loading, and the seeded train/validation split.
#include "objectives/idx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "search/errors.h"

namespace hps {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;
using ::testing::AllOf;
using ::testing::HasSubstr;

// IDX header for `dims` with the given type code, followed by `payload`.
Bytes idx_bytes(const std::vector<std::uint32_t>& dims, const Bytes& payload,
                std::uint8_t type = 0x08) {
  Bytes out = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims) {
    out.push_back(static_cast<std::uint8_t>(d >> 24));
    out.push_back(static_cast<std::uint8_t>(d >> 16));
    out.push_back(static_cast<std::uint8_t>(d >> 8));
    out.push_back(static_cast<std::uint8_t>(d));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Bytes random_bytes(std::size_t n, std::uint8_t modulo, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng() % modulo);
  return out;
}

void write_plain(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gzip(const fs::path& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

Bytes read_raw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The message of the hps::Error thrown by `fn` ("" and a test failure if none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no hps::Error thrown";
  return "";
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "hps_idx_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(IdxTest, ReadsPlainFileExactly) {
  const Bytes payload = random_bytes(3 * 2 * 4, 255, 1);
  write_plain(file("a"), idx_bytes({3, 2, 4}, payload));
  const IdxArray a = read_idx(file("a"));
  EXPECT_EQ(a.magic, 0x00000803u);
  EXPECT_EQ(a.dims, (std::vector<std::uint32_t>{3, 2, 4}));
  EXPECT_EQ(a.data, payload);
}

TEST_F(IdxTest, DimSizesAreBigEndian) {
  // 0x00000102 = 258 elements: a little-endian reader would see 0x02010000.
  const Bytes payload = random_bytes(258, 255, 2);
  write_plain(file("a"), idx_bytes({258}, payload));
  const IdxArray a = read_idx(file("a"));
  EXPECT_EQ(a.dims, (std::vector<std::uint32_t>{258}));
  EXPECT_EQ(a.data, payload);
}

TEST_F(IdxTest, GzipReadsTheSameAsPlain) {
  // Large enough to span several internal read chunks.
  const Bytes payload = random_bytes(3000 * 28 * 28, 7, 3);
  const Bytes bytes = idx_bytes({3000, 28, 28}, payload);
  write_plain(file("plain"), bytes);
  write_gzip(file("packed.gz"), bytes);
  const Bytes raw = read_raw(file("packed.gz"));
  ASSERT_GE(raw.size(), 2u);
  ASSERT_EQ(raw[0], 0x1f);  // really gzip-compressed
  ASSERT_EQ(raw[1], 0x8b);
  ASSERT_LT(raw.size(), bytes.size());

  const IdxArray plain = read_idx(file("plain"));
  const IdxArray packed = read_idx(file("packed.gz"));
  EXPECT_EQ(packed.magic, plain.magic);
  EXPECT_EQ(packed.dims, plain.dims);
  EXPECT_EQ(packed.data, plain.data);
  EXPECT_EQ(packed.data, payload);
}

TEST_F(IdxTest, ZeroSizedDimGivesEmptyArray) {
  write_plain(file("a"), idx_bytes({0, 28, 28}, {}));
  const IdxArray a = read_idx(file("a"));
  EXPECT_EQ(a.dims, (std::vector<std::uint32_t>{0, 28, 28}));
  EXPECT_TRUE(a.data.empty());
}

TEST_F(IdxTest, MissingFileIsNamed) {
  const std::string msg = error_of([&] { read_idx(file("nope-idx3-ubyte.gz")); });
  EXPECT_THAT(msg, AllOf(HasSubstr(file("nope-idx3-ubyte.gz")), HasSubstr("file not found")));
  EXPECT_THAT(error_of([&] { read_idx(dir_.string()); }), HasSubstr("not a regular file"));
}

TEST_F(IdxTest, WrongMagicShowsExpectedAndGotInHex) {
  write_plain(file("labels"), idx_bytes({4}, {1, 2, 3, 4}));
  const std::string msg = error_of([&] { read_idx(file("labels"), 0x00000803); });
  EXPECT_THAT(msg, AllOf(HasSubstr(file("labels")), HasSubstr("wrong magic number"),
                         HasSubstr("expected 0x00000803"), HasSubstr("got 0x00000801")));

  // Not an IDX file at all (a zip header).
  write_plain(file("zip"), {'P', 'K', 3, 4, 0, 0, 0, 0});
  EXPECT_THAT(error_of([&] { read_idx(file("zip")); }),
              AllOf(HasSubstr("wrong magic number"), HasSubstr("got 0x504B0304"),
                    HasSubstr("not an IDX file")));
}

TEST_F(IdxTest, RejectsUnsupportedTypeAndZeroDims) {
  write_plain(file("float"), idx_bytes({2}, Bytes(8, 0), 0x0D));
  EXPECT_THAT(error_of([&] { read_idx(file("float")); }),
              AllOf(HasSubstr("unsupported data type 0x0D"), HasSubstr("float32"),
                    HasSubstr("0x08 (unsigned byte)")));
  write_plain(file("scalar"), idx_bytes({}, {5}));
  EXPECT_THAT(error_of([&] { read_idx(file("scalar")); }), HasSubstr("number of dims is 0"));
}

TEST_F(IdxTest, TruncatedHeader) {
  write_plain(file("a"), {0, 0, 8});
  EXPECT_THAT(error_of([&] { read_idx(file("a")); }),
              AllOf(HasSubstr("truncated header"), HasSubstr("got 3")));
  Bytes b = idx_bytes({2, 3, 4}, {});
  b.resize(4 + 6);  // 3 dims need 12 bytes of sizes
  write_plain(file("b"), b);
  EXPECT_THAT(
      error_of([&] { read_idx(file("b")); }),
      AllOf(HasSubstr("truncated header"), HasSubstr("expected 12 bytes"), HasSubstr("got 6")));
}

TEST_F(IdxTest, TruncatedDataPlainAndGzip) {
  const Bytes bytes = idx_bytes({2, 3, 4}, random_bytes(20, 255, 4));  // 24 claimed
  write_plain(file("plain"), bytes);
  write_gzip(file("packed.gz"), bytes);
  for (const std::string name : {"plain", "packed.gz"}) {
    EXPECT_THAT(error_of([&] { read_idx(file(name)); }),
                AllOf(HasSubstr(file(name)), HasSubstr("truncated data"),
                      HasSubstr("expected 24 bytes, got 20")));
  }
}

TEST_F(IdxTest, CutGzipStreamFailsCleanly) {
  const Bytes bytes = idx_bytes({100, 10, 10}, random_bytes(10000, 255, 5));
  write_gzip(file("full.gz"), bytes);
  Bytes packed = read_raw(file("full.gz"));
  packed.resize(packed.size() / 2);
  write_plain(file("cut.gz"), packed);
  EXPECT_THAT(error_of([&] { read_idx(file("cut.gz")); }), HasSubstr(file("cut.gz")));
  // Corrupt deflate data after a valid gzip header.
  Bytes garbage = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  for (int i = 0; i < 64; ++i) garbage.push_back(0xff);
  write_plain(file("bad.gz"), garbage);
  EXPECT_THAT(error_of([&] { read_idx(file("bad.gz")); }), HasSubstr(file("bad.gz")));
}

TEST_F(IdxTest, TrailingDataIsRejected) {
  write_plain(file("a"), idx_bytes({2}, {1, 2, 3}));
  EXPECT_THAT(error_of([&] { read_idx(file("a")); }),
              AllOf(HasSubstr("trailing data"), HasSubstr("2 bytes")));
}

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST_F(IdxTest, HugeClaimedSizeWithLittleDataFailsWithoutHugeAllocation) {
  // The header claims exactly the cap, 2^31 bytes; only 100 follow.
  static_assert(kMaxIdxBytes == std::uint64_t{2} * 1024 * 1024 * 1024);
  write_plain(file("a"), idx_bytes({2, 1024, 1024, 1024}, Bytes(100, 7)));
  write_gzip(file("a.gz"), idx_bytes({2, 1024, 1024, 1024}, Bytes(100, 7)));
  const long before = peak_rss_kib();
  for (const std::string name : {"a", "a.gz"}) {
    EXPECT_THAT(
        error_of([&] { read_idx(file(name)); }),
        AllOf(HasSubstr("truncated data"), HasSubstr("expected 2147483648 bytes, got 100")));
  }
  // Filling a buffer of the claimed size would raise the peak by 2 GiB.
  EXPECT_LT(peak_rss_kib() - before, 256 * 1024);
}

TEST_F(IdxTest, ClaimsBeyondTheCapAreRejectedWithoutOverflow) {
  // 65536^4 = 2^64 wraps to 0 in 64-bit arithmetic.
  write_plain(file("wrap"), idx_bytes({65536, 65536, 65536, 65536}, {}));
  EXPECT_THAT(error_of([&] { read_idx(file("wrap")); }),
              AllOf(HasSubstr("65536 x 65536 x 65536 x 65536"), HasSubstr("limit of 2147483648")));
  write_plain(file("one"), idx_bytes({0x80000001u}, {}));
  EXPECT_THAT(error_of([&] { read_idx(file("one")); }), HasSubstr("limit of 2147483648"));
  // 255 dims of size 2 (the most an IDX header can declare).
  write_plain(file("many"), idx_bytes(std::vector<std::uint32_t>(255, 2), {}));
  EXPECT_THAT(error_of([&] { read_idx(file("many")); }), HasSubstr("limit of 2147483648"));
}

TEST_F(IdxTest, LoadsMnistSplit) {
  const Bytes pixels = random_bytes(5 * 3 * 2, 255, 6);
  const Bytes labels = random_bytes(5, 10, 7);
  write_plain(file("images"), idx_bytes({5, 3, 2}, pixels));
  write_gzip(file("labels.gz"), idx_bytes({5}, labels, 0x08));
  const Dataset data = load_mnist_split(file("images"), file("labels.gz"));
  EXPECT_EQ(data.n, 5u);
  EXPECT_EQ(data.rows, 3u);
  EXPECT_EQ(data.cols, 2u);
  EXPECT_EQ(data.images, pixels);
  EXPECT_EQ(data.labels, labels);
}

TEST_F(IdxTest, MnistSplitChecksShapes) {
  write_plain(file("images"), idx_bytes({3, 2, 2}, Bytes(12, 1)));
  write_plain(file("labels"), idx_bytes({3}, {0, 1, 2}));
  // Swapped files: the magic numbers fix the number of dims.
  EXPECT_THAT(error_of([&] { load_mnist_split(file("labels"), file("images")); }),
              AllOf(HasSubstr(file("labels")), HasSubstr("expected 0x00000803"),
                    HasSubstr("got 0x00000801")));
  write_plain(file("images2d"), idx_bytes({3, 4}, Bytes(12, 1)));
  EXPECT_THAT(error_of([&] { load_mnist_split(file("images2d"), file("labels")); }),
              AllOf(HasSubstr("expected 0x00000803"), HasSubstr("got 0x00000802")));
  write_plain(file("labels2d"), idx_bytes({3, 1}, {0, 1, 2}));
  EXPECT_THAT(error_of([&] { load_mnist_split(file("images"), file("labels2d")); }),
              AllOf(HasSubstr(file("labels2d")), HasSubstr("expected 0x00000801"),
                    HasSubstr("got 0x00000802")));
  write_plain(file("empty"), idx_bytes({0, 2, 2}, {}));
  EXPECT_THAT(error_of([&] { load_mnist_split(file("empty"), file("labels")); }),
              HasSubstr("contains no images"));
  write_plain(file("flat"), idx_bytes({3, 0, 2}, {}));
  EXPECT_THAT(error_of([&] { load_mnist_split(file("flat"), file("labels")); }),
              HasSubstr("must be at least 1 x 1"));
}

TEST_F(IdxTest, MnistSplitCountMismatch) {
  write_plain(file("images"), idx_bytes({3, 2, 2}, Bytes(12, 1)));
  write_plain(file("labels"), idx_bytes({4}, {0, 1, 2, 3}));
  EXPECT_THAT(error_of([&] { load_mnist_split(file("images"), file("labels")); }),
              AllOf(HasSubstr(file("labels")), HasSubstr("4 labels"), HasSubstr("3 images"),
                    HasSubstr("counts must be equal")));
}

TEST_F(IdxTest, MnistSplitLabelOutOfRange) {
  write_plain(file("images"), idx_bytes({4, 2, 2}, Bytes(16, 1)));
  write_plain(file("labels"), idx_bytes({4}, {9, 0, 10, 3}));
  EXPECT_THAT(
      error_of([&] { load_mnist_split(file("images"), file("labels")); }),
      AllOf(HasSubstr(file("labels")), HasSubstr("label 10 at index 2"), HasSubstr("[0, 10)")));
}

TEST_F(IdxTest, FashionMnistPrefersGzipOverPlain) {
  // Plain test files with 2 images, gzipped ones with 3: the .gz must win.
  write_plain(file("t10k-images-idx3-ubyte"), idx_bytes({2, 2, 2}, Bytes(8, 1)));
  write_plain(file("t10k-labels-idx1-ubyte"), idx_bytes({2}, {1, 1}));
  write_gzip(file("t10k-images-idx3-ubyte.gz"), idx_bytes({3, 2, 2}, Bytes(12, 2)));
  write_gzip(file("t10k-labels-idx1-ubyte.gz"), idx_bytes({3}, {2, 2, 2}));
  const Dataset test = load_fashion_mnist(dir_.string(), false);
  EXPECT_EQ(test.n, 3u);
  EXPECT_EQ(test.labels, (Bytes{2, 2, 2}));

  // Only plain training files.
  write_plain(file("train-images-idx3-ubyte"), idx_bytes({2, 1, 3}, Bytes(6, 4)));
  write_plain(file("train-labels-idx1-ubyte"), idx_bytes({2}, {4, 5}));
  const Dataset train = load_fashion_mnist(dir_.string(), true);
  EXPECT_EQ(train.n, 2u);
  EXPECT_EQ(train.rows, 1u);
  EXPECT_EQ(train.cols, 3u);
  EXPECT_EQ(train.labels, (Bytes{4, 5}));
}

TEST_F(IdxTest, FashionMnistMissingFilesAreNamed) {
  const std::string msg = error_of([&] { load_fashion_mnist(dir_.string(), true); });
  EXPECT_THAT(
      msg, AllOf(HasSubstr("train-images-idx3-ubyte.gz"),
                 HasSubstr("nor " + file("train-images-idx3-ubyte")), HasSubstr("file not found")));
  write_gzip(file("train-images-idx3-ubyte.gz"), idx_bytes({1, 1, 1}, {0}));
  EXPECT_THAT(error_of([&] { load_fashion_mnist(dir_.string(), true); }),
              HasSubstr("train-labels-idx1-ubyte.gz"));
}

TEST(FashionMnistTest, ReadsRealTestSplit) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << dir << " is absent";
  }
  const Dataset test = load_fashion_mnist(dir, false);
  EXPECT_EQ(test.n, 10000u);
  EXPECT_EQ(test.rows, 28u);
  EXPECT_EQ(test.cols, 28u);
  EXPECT_EQ(test.images.size(), 10000u * 28 * 28);
  ASSERT_EQ(test.labels.size(), 10000u);
  std::set<int> classes(test.labels.begin(), test.labels.end());
  EXPECT_EQ(classes.size(), 10u);
  EXPECT_LT(*classes.rbegin(), Dataset::kNumClasses);
  // Real images use the whole grey range (catches a wrong byte offset of 0s).
  EXPECT_EQ(*std::max_element(test.images.begin(), test.images.end()), 255);
}

// ---------------------------------------------------------------- split

void expect_partition(const IndexSplit& split, std::size_t n) {
  std::vector<std::size_t> all = split.train;
  all.insert(all.end(), split.val.begin(), split.val.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(all[i], i) << "index missing or repeated";
}

TEST(SplitIndicesTest, SizesAndPartition) {
  const IndexSplit s = split_indices(1000, 0.1, 42);
  EXPECT_EQ(s.train.size(), 900u);
  EXPECT_EQ(s.val.size(), 100u);
  expect_partition(s, 1000);
  // Rounds n * val_fraction: 0.25 * 10 = 2.5 -> 3; 0.14 * 10 = 1.4 -> 1.
  EXPECT_EQ(split_indices(10, 0.25, 1).val.size(), 3u);
  EXPECT_EQ(split_indices(10, 0.14, 1).val.size(), 1u);
  // Never an empty part.
  const IndexSplit tiny = split_indices(5, 0.01, 1);
  EXPECT_EQ(tiny.val.size(), 1u);
  EXPECT_EQ(tiny.train.size(), 4u);
  expect_partition(tiny, 5);
  const IndexSplit most = split_indices(5, 0.99, 1);
  EXPECT_EQ(most.val.size(), 4u);
  EXPECT_EQ(most.train.size(), 1u);
  expect_partition(most, 5);
  expect_partition(split_indices(2, 0.5, 9), 2);
}

TEST(SplitIndicesTest, SeededAndShuffled) {
  const IndexSplit a = split_indices(1000, 0.2, 7);
  const IndexSplit b = split_indices(1000, 0.2, 7);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.val, b.val);
  const IndexSplit c = split_indices(1000, 0.2, 8);
  EXPECT_NE(a.val, c.val);
  // Shuffled, not the identity order.
  EXPECT_FALSE(std::is_sorted(a.train.begin(), a.train.end()));
  EXPECT_FALSE(std::is_sorted(a.val.begin(), a.val.end()));
}

TEST(SplitIndicesTest, SubsetIsPrefixOfShuffledTraining) {
  const IndexSplit full = split_indices(500, 0.1, 3);
  const IndexSplit sub = split_indices(500, 0.1, 3, 50);
  ASSERT_EQ(sub.train.size(), 50u);
  EXPECT_TRUE(std::equal(sub.train.begin(), sub.train.end(), full.train.begin()));
  EXPECT_EQ(sub.val, full.val);
  const IndexSplit all = split_indices(500, 0.1, 3, 450);
  EXPECT_EQ(all.train, full.train);
}

TEST(SplitIndicesTest, EveryIndexEquallyLikelyInValidation) {
  // n = 10, one validation index: over 20000 seeds each index should be it
  // about 2000 times. A biased shuffle (e.g. Sattolo's j < i, which never
  // leaves the last index in place) fails this chi-square test.
  constexpr std::size_t kN = 10;
  constexpr int kSeeds = 20000;
  std::vector<int> counts(kN, 0);
  for (int seed = 0; seed < kSeeds; ++seed) {
    const IndexSplit s = split_indices(kN, 0.1, static_cast<std::uint64_t>(seed));
    ASSERT_EQ(s.val.size(), 1u);
    ++counts[s.val[0]];
  }
  const double expected = static_cast<double>(kSeeds) / kN;
  double chi2 = 0;
  for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 27.88);  // 9 degrees of freedom, p = 0.001
}

TEST(SplitIndicesTest, RejectsBadArguments) {
  for (double f : {0.0, 1.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    try {
      split_indices(100, f, 1);
      ADD_FAILURE() << "val_fraction " << f << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.path(), "val_fraction");
      EXPECT_THAT(e.what(), HasSubstr("(0, 1)"));
    }
  }
  for (std::size_t n : {0u, 1u}) {
    try {
      split_indices(n, 0.5, 1);
      ADD_FAILURE() << "n = " << n << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.path(), "n");
    }
  }
  try {
    split_indices(100, 0.1, 1, 91);
    ADD_FAILURE() << "subset larger than the training part accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), "subset");
    EXPECT_THAT(e.what(), AllOf(HasSubstr("90"), HasSubstr("91")));
  }
}

}  // namespace
}  // namespace hps

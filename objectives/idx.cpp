#include "objectives/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <system_error>

#include "search/errors.h"
#include "search/util/random.h"

namespace hps {
namespace {

constexpr std::uint8_t kTypeUnsignedByte = 0x08;
constexpr std::uint32_t kImagesMagic = 0x00000803;
constexpr std::uint32_t kLabelsMagic = 0x00000801;
// Bytes requested from gzread per call (well below its INT_MAX limit).
constexpr std::size_t kReadChunk = std::size_t{1} << 20;

std::string hex32(std::uint32_t value) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08X", value);
  return buf;
}

std::string hex8(std::uint8_t value) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "0x%02X", value);
  return buf;
}

const char* type_name(std::uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "not an IDX type";
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& rule) {
  throw Error(path + ": " + rule);
}

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// zlib's error text for `file`, or "" when there is none.
std::string gz_error_text(gzFile file) {
  int errnum = Z_OK;
  const char* text = gzerror(file, &errnum);
  if (errnum == Z_OK || text == nullptr || *text == '\0') return "";
  if (errnum == Z_ERRNO) {
    return std::error_code(errno, std::generic_category()).message();
  }
  return text;
}

// Reads up to `size` bytes into `out`; returns the count read (< size only
// at end of input). Throws on a read or decompression error.
std::size_t read_some(gzFile file, const std::string& path, std::uint8_t* out, std::size_t size) {
  std::size_t total = 0;
  while (total < size) {
    const auto want = static_cast<unsigned>(std::min(size - total, kReadChunk));
    const int got = gzread(file, out + total, want);
    if (got < 0) fail(path, "read error: " + gz_error_text(file));
    if (got == 0) break;
    total += static_cast<std::size_t>(got);
  }
  return total;
}

std::uint32_t big_endian32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

std::string dims_text(const std::vector<std::uint32_t>& dims) {
  std::ostringstream out;
  for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? " x " : "") << dims[i];
  return out.str();
}

}  // namespace

IdxArray read_idx(const std::string& path, std::uint32_t expected_magic) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) fail(path, "file not found");
  if (!std::filesystem::is_regular_file(status)) fail(path, "not a regular file");

  // gzopen reads gzip streams (magic bytes 1f 8b) and plain files alike.
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (!file) {
    fail(path, "cannot open: " + std::error_code(errno, std::generic_category()).message());
  }
  gzbuffer(file.get(), 128 * 1024);

  std::uint8_t head[4];
  std::size_t got = read_some(file.get(), path, head, sizeof head);
  if (got < sizeof head) {
    fail(path, "truncated header: expected 4 bytes of magic number, got " + std::to_string(got));
  }
  IdxArray array;
  array.magic = big_endian32(head);
  if (head[0] != 0 || head[1] != 0) {
    fail(path, "wrong magic number: expected " +
                   (expected_magic ? hex32(expected_magic)
                                   : std::string("0x0000TTDD (TT = type, DD = number of dims)")) +
                   ", got " + hex32(array.magic) + "; not an IDX file");
  }
  if (expected_magic != 0 && array.magic != expected_magic) {
    fail(path,
         "wrong magic number: expected " + hex32(expected_magic) + ", got " + hex32(array.magic));
  }
  const std::uint8_t type = head[2];
  const std::size_t ndim = head[3];
  if (type != kTypeUnsignedByte) {
    fail(path, "unsupported data type " + hex8(type) + " (" + type_name(type) +
                   "); only 0x08 (unsigned byte) is supported");
  }
  if (ndim == 0) fail(path, "number of dims is 0; need at least 1");

  std::vector<std::uint8_t> dim_bytes(4 * ndim);
  got = read_some(file.get(), path, dim_bytes.data(), dim_bytes.size());
  if (got < dim_bytes.size()) {
    fail(path, "truncated header: expected " + std::to_string(dim_bytes.size()) +
                   " bytes of dimension sizes, got " + std::to_string(got));
  }
  array.dims.resize(ndim);
  for (std::size_t i = 0; i < ndim; ++i) array.dims[i] = big_endian32(&dim_bytes[4 * i]);
  // Payload size, checked against the cap before each multiplication so that
  // it can never overflow; a 0 dim makes an empty (valid) array.
  std::uint64_t expected = 0;
  if (std::find(array.dims.begin(), array.dims.end(), 0u) == array.dims.end()) {
    expected = 1;
    for (const std::uint64_t dim : array.dims) {
      if (expected > kMaxIdxBytes / dim) {
        fail(path, "dims " + dims_text(array.dims) + " claim more than the limit of " +
                       std::to_string(kMaxIdxBytes) + " bytes; the header is corrupt");
      }
      expected *= dim;
    }
  }

  // Grow the buffer with the data actually read, one chunk at a time; the
  // capacity doubles as data arrives but never exceeds `expected`.
  std::size_t have = 0;
  while (have < expected) {
    const auto step =
        static_cast<std::size_t>(std::min<std::uint64_t>(expected - have, kReadChunk));
    if (have + step > array.data.capacity()) {
      array.data.reserve(static_cast<std::size_t>(
          std::min<std::uint64_t>(expected, std::max(2 * array.data.capacity(), have + step))));
    }
    array.data.resize(have + step);
    const std::size_t n = read_some(file.get(), path, array.data.data() + have, step);
    have += n;
    if (n < step) break;
  }
  if (have < expected) {
    std::string detail = gz_error_text(file.get());
    fail(path, "truncated data: expected " + std::to_string(expected) + " bytes, got " +
                   std::to_string(have) + " (dims " + dims_text(array.dims) + ")" +
                   (detail.empty() ? "" : "; zlib: " + detail));
  }
  std::uint8_t extra;
  if (read_some(file.get(), path, &extra, 1) != 0) {
    fail(path, "trailing data after the " + std::to_string(expected) +
                   " bytes the header claims (dims " + dims_text(array.dims) + ")");
  }
  return array;
}

Dataset load_mnist_split(const std::string& images_path, const std::string& labels_path) {
  IdxArray images = read_idx(images_path, kImagesMagic);
  IdxArray labels = read_idx(labels_path, kLabelsMagic);
  // The magic numbers fix the number of dims: 3 for images, 1 for labels.
  Dataset data;
  data.n = images.dims[0];
  data.rows = images.dims[1];
  data.cols = images.dims[2];
  if (data.n == 0) fail(images_path, "contains no images; need at least 1");
  if (data.rows == 0 || data.cols == 0) {
    fail(images_path, "image size " + dims_text({images.dims[1], images.dims[2]}) +
                          " is empty; must be at least 1 x 1");
  }
  if (labels.dims[0] != data.n) {
    fail(labels_path, std::to_string(labels.dims[0]) + " labels but " + images_path + " has " +
                          std::to_string(data.n) + " images; the counts must be equal");
  }
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= Dataset::kNumClasses) {
      fail(labels_path, "label " + std::to_string(labels.data[i]) + " at index " +
                            std::to_string(i) + " is out of range; labels must be in [0, " +
                            std::to_string(Dataset::kNumClasses) + ")");
    }
  }
  data.images = std::move(images.data);
  data.labels = std::move(labels.data);
  return data;
}

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  auto locate = [&](const std::string& name) {
    const std::filesystem::path plain = std::filesystem::path(dir) / name;
    std::filesystem::path gz = plain;
    gz += ".gz";
    std::error_code ec;
    if (std::filesystem::exists(gz, ec)) return gz.string();
    if (std::filesystem::exists(plain, ec)) return plain.string();
    throw Error(gz.string() + ": file not found (nor " + plain.string() +
                "); expected the Fashion-MNIST " + (train ? "training" : "test") +
                " files under their standard names in " + dir);
  };
  const std::string images = locate(prefix + "-images-idx3-ubyte");
  const std::string labels = locate(prefix + "-labels-idx1-ubyte");
  return load_mnist_split(images, labels);
}

IndexSplit split_indices(std::size_t n, double val_fraction, std::uint64_t seed,
                         std::size_t subset) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) {
    std::ostringstream got;
    got << val_fraction;
    throw ConfigError("val_fraction", "must be in the open interval (0, 1), got " + got.str());
  }
  if (n < 2) {
    throw ConfigError("n", "need at least 2 examples to split into train and validation, got " +
                               std::to_string(n));
  }
  const double rounded = std::round(static_cast<double>(n) * val_fraction);
  const std::size_t n_val = std::clamp<std::size_t>(static_cast<std::size_t>(rounded), 1, n - 1);
  const std::size_t n_train = n - n_val;
  if (subset > n_train) {
    throw ConfigError("subset", "must be at most the " + std::to_string(n_train) +
                                    " training examples left after the validation split, got " +
                                    std::to_string(subset));
  }

  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 rng(seed);
  // Fisher-Yates: for i = n-1 down to 1, swap order[i] with order[j], j uniform in [0, i].
  for (std::size_t i = n - 1; i > 0; --i) {
    const auto j =
        static_cast<std::size_t>(util::uniform_below_by_modulo(rng, std::uint64_t{i} + 1));
    std::swap(order[i], order[j]);
  }

  IndexSplit split;
  const std::size_t keep = subset > 0 ? subset : n_train;
  split.train.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
  split.val.assign(order.begin() + static_cast<std::ptrdiff_t>(n_train), order.end());
  return split;
}

}  // namespace hps

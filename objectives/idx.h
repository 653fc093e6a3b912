// Reader for the IDX file format of MNIST and Fashion-MNIST, plus a seeded
// train/validation split. Used by the LibTorch objectives but independent of
// LibTorch (needs only zlib).
//
// IDX format (Y. LeCun, C. Cortes, C. Burges, "The MNIST database of
// handwritten digits", http://yann.lecun.com/exdb/mnist/, "FILE FORMATS"):
//
//   offset 0: magic number, 4 bytes big-endian = 0x00 0x00 <type> <ndim>
//             type 0x08 unsigned byte, 0x09 signed byte, 0x0B int16,
//             0x0C int32, 0x0D float32, 0x0E float64
//   offset 4: ndim sizes, each a 4-byte big-endian unsigned integer
//   then:     the elements in row-major (C) order, last dimension fastest
//
// MNIST/Fashion-MNIST use 0x00000803 for images (uint8, [N, rows, cols]) and
// 0x00000801 for labels (uint8, [N]). The files may be gzip-compressed (as
// distributed) or plain: zlib's gzread recognises the gzip magic bytes
// 1f 8b and reads any other file through unchanged.
//
// Every failure is an hps::Error whose message starts with the file's path
// and states the broken rule, e.g.
//   "data/t10k-images-idx3-ubyte.gz: wrong magic number: expected 0x00000803
//    (uint8 images, 3 dims), got 0x00000801".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hps {

// Largest payload (bytes after the header) read_idx() accepts: 2 GiB. Guards
// against corrupt headers claiming absurd sizes. The full Fashion-MNIST
// training images are 47,040,000 bytes.
inline constexpr std::uint64_t kMaxIdxBytes = std::uint64_t{1} << 31;

// An IDX array of unsigned bytes (type 0x08).
struct IdxArray {
  std::uint32_t magic = 0;          // e.g. 0x00000803; low byte = dims.size()
  std::vector<std::uint32_t> dims;  // sizes, outermost first
  std::vector<std::uint8_t> data;   // product(dims) elements, row-major
};

// Reads an IDX file, gzip-compressed or plain.
//
// If `expected_magic` is non-zero the magic number must equal it (checked
// right after the first 4 bytes, before any data is read).
//
// Reading is incremental: memory grows with the bytes actually read, never
// beyond what the header claims, so a header claiming a large size over a
// short file fails without allocating the claimed size.
//
// Throws hps::Error (message "<path>: <rule>") when:
//   - the file does not exist or is not a regular file ("file not found");
//   - it cannot be opened or decompressed (zlib's message is included);
//   - the header is shorter than 4 + 4 * ndim bytes ("truncated header");
//   - the magic number does not start with two zero bytes, or differs from
//     `expected_magic` ("wrong magic number: expected 0x........, got
//     0x........");
//   - the type code is not 0x08 ("unsupported data type 0x0D (float32); only
//     0x08 (unsigned byte) is supported");
//   - ndim is 0;
//   - product(dims) exceeds kMaxIdxBytes (computed without overflow);
//   - fewer bytes follow the header than product(dims) ("truncated data:
//     expected N bytes, got M");
//   - more bytes follow ("trailing data after the N bytes the header claims").
IdxArray read_idx(const std::string& path, std::uint32_t expected_magic = 0);

// One split of an MNIST-like data set.
struct Dataset {
  std::size_t n = 0;     // number of examples
  std::size_t rows = 0;  // image height in pixels
  std::size_t cols = 0;  // image width in pixels
  // n * rows * cols grey levels 0..255, image i at [i*rows*cols, (i+1)*rows*cols),
  // each image row-major (pixel (r, c) at offset r*cols + c).
  std::vector<std::uint8_t> images;
  std::vector<std::uint8_t> labels;  // n class labels, each in [0, kNumClasses)

  static constexpr int kNumClasses = 10;
};

// Reads an images file (magic 0x00000803, dims [N, rows, cols]) and a labels
// file (magic 0x00000801, dims [N]) into a Dataset.
//
// Throws hps::Error for any read_idx() error (wrong magic number covers a
// wrong number of dims or a swapped images/labels pair), and when:
//   - N, rows or cols is 0 ("<images>: contains no images" / "image size
//     must be at least 1x1");
//   - the counts differ ("<labels>: 9999 labels but <images> has 10000
//     images; the counts must be equal");
//   - a label is >= 10 ("<labels>: label 12 at index 7 is out of range; labels
//     must be in [0, 10)").
Dataset load_mnist_split(const std::string& images_path, const std::string& labels_path);

// Loads the training (`train` = true: 60,000 images) or test (10,000 images)
// split of Fashion-MNIST (or MNIST) from directory `dir`, which holds the
// files under their standard names:
//   train-images-idx3-ubyte, train-labels-idx1-ubyte,
//   t10k-images-idx3-ubyte,  t10k-labels-idx1-ubyte,
// each either gzip-compressed with suffix ".gz" (preferred when both exist)
// or uncompressed without suffix.
// Throws hps::Error naming both candidate paths when neither exists, and any
// error of load_mnist_split().
Dataset load_fashion_mnist(const std::string& dir, bool train);

// Indices of the training and validation parts of a split.
struct IndexSplit {
  std::vector<std::size_t> train;
  std::vector<std::size_t> val;
};

// Seeded random split of the example indices 0..n-1.
//
// The indices are shuffled with a Fisher-Yates shuffle (Knuth, TAOCP vol. 2,
// 3.4.2, Algorithm P) driven by std::mt19937_64(seed); each random index is
// drawn without modulo bias by rejection (as OpenBSD's arc4random_uniform),
// so the result is the same on every platform and standard library.
// The last n_val = round(n * val_fraction), clamped to [1, n - 1], shuffled
// indices form `val`; the others, in shuffled order, form `train`. If
// `subset` > 0, `train` keeps only its first `subset` indices (a random
// subset of size `subset`); `val` is unchanged. train and val are disjoint;
// without a subset together they hold every index exactly once.
//
// Throws hps::ConfigError when:
//   - val_fraction is not in the open interval (0, 1) (path "val_fraction");
//   - n < 2 (path "n": nothing to split);
//   - subset exceeds the size of the training part (path "subset").
IndexSplit split_indices(std::size_t n, double val_fraction, std::uint64_t seed,
                         std::size_t subset = 0);

}  // namespace hps

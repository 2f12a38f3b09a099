// Threefry-2x32 (20 rounds) for eager CPU calls of funrl.random (and the draw of funrl.buffers'
// eager flat sample, funrl_randint_rows): one pass over the output instead
// of ~170 torch integer ops of a few microseconds each. Same values as funrl.random.threefry2x32's
// torch ops (tests/test_random.py compares them): each input word is taken mod 2**32, and the
// outputs are written as int64 in [0, 2**32).
#include <cstdint>
#include <cstring>

namespace {

constexpr uint32_t kParity = 0x1BD11BDAu;
constexpr int kRotations[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};

inline uint32_t rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

inline void block(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, int64_t* y0,
                  int64_t* y1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ kParity};
  uint32_t x0 = c0 + k0;
  uint32_t x1 = c1 + k1;
  for (int b = 0; b < 5; ++b) {
    for (int r = 0; r < 4; ++r) {
      x0 += x1;
      x1 = rotl(x1, kRotations[b % 2][r]) ^ x0;
    }
    x0 += ks[(b + 1) % 3];
    x1 += ks[(b + 2) % 3] + static_cast<uint32_t>(b + 1);
  }
  *y0 = x0;
  *y1 = x1;
}

}  // namespace

extern "C" {

// (y0[i*sy], y1[i*sy]) = threefry2x32((k0[i*sk0], k1[i*sk1]), (c0[i*sc0], c1[i*sc1])) for i < n.
// An input step of 0 broadcasts one word, 1 walks a contiguous array; an output step of 2 with
// y1 = y0 + 1 writes keys ([n, 2]) directly.
void funrl_threefry2x32(const int64_t* k0, int64_t sk0, const int64_t* k1, int64_t sk1,
                        const int64_t* c0, int64_t sc0, const int64_t* c1, int64_t sc1,
                        int64_t* y0, int64_t* y1, int64_t sy, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    block(static_cast<uint32_t>(k0[i * sk0]), static_cast<uint32_t>(k1[i * sk1]),
          static_cast<uint32_t>(c0[i * sc0]), static_cast<uint32_t>(c1[i * sc1]), y0 + i * sy,
          y1 + i * sy);
  }
}

// The blocks of one key (words key[0] and key[stride]) over the counters 0..n-1, each counter
// split into its high and low 32-bit words (JAX's iota_2x32_shape).
void funrl_threefry2x32_iota(const int64_t* key, int64_t stride, int64_t* y0, int64_t* y1,
                             int64_t sy, int64_t n) {
  const uint32_t k0 = static_cast<uint32_t>(key[0]);
  const uint32_t k1 = static_cast<uint32_t>(key[stride]);
  for (int64_t i = 0; i < n; ++i) {
    block(k0, k1,
          static_cast<uint32_t>(static_cast<uint64_t>(i) >> 32), static_cast<uint32_t>(i), y0 + i * sy,
          y1 + i * sy);
  }
}

// out[i] = low + w mod span for the 63-bit word w = ((y0 >> 1) << 32) | y1 of the block at
// counter i (funrl.random.randint's reduction; span > 0).
void funrl_randint_iota(const int64_t* key, int64_t stride, int64_t low, int64_t span, int64_t* out,
                        int64_t n) {
  const uint32_t k0 = static_cast<uint32_t>(key[0]);
  const uint32_t k1 = static_cast<uint32_t>(key[stride]);
  const uint64_t range = static_cast<uint64_t>(span);
  for (int64_t i = 0; i < n; ++i) {
    int64_t y0, y1;
    block(k0, k1, static_cast<uint32_t>(static_cast<uint64_t>(i) >> 32), static_cast<uint32_t>(i),
          &y0, &y1);
    const uint64_t word = (static_cast<uint64_t>(y0 >> 1) << 32) | static_cast<uint64_t>(y1);
    out[i] = low + static_cast<int64_t>(word % range);
  }
}


// funrl_randint_iota's draws with low = 0 (rows in [0, span)), then those rows of each of
// num_groups row-major storages copied out: group g's row r is bytes [r * row_bytes[g], (r + 1) *
// row_bytes[g]) of src[g], written to row i of dst[g]. The eager replay sample in one call.
void funrl_randint_rows(const int64_t* key, int64_t stride, int64_t span, int64_t* rows, int64_t n,
                        int64_t num_groups, const char* const* src, const int64_t* row_bytes,
                        char* const* dst) {
  funrl_randint_iota(key, stride, 0, span, rows, n);
  // Rows of a storage larger than the caches are each a cache miss: ask for the lines of the row
  // kPrefetchAhead places on while copying this one, so that many are on their way at once.
  constexpr int64_t kPrefetchAhead = 16;
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t size = row_bytes[g];
    if (size == 0) continue;  // zero-size leaves only: the storage may have no memory at all
    for (int64_t i = 0; i < n; ++i) {
      if (i + kPrefetchAhead < n) {
        const char* ahead = src[g] + rows[i + kPrefetchAhead] * size;
        for (int64_t line = 0; line < size; line += 64) __builtin_prefetch(ahead + line);
        __builtin_prefetch(ahead + size - 1);
      }
      std::memcpy(dst[g] + i * size, src[g] + rows[i] * size, size);
    }
  }
}

}  // extern "C"

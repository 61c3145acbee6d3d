// Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as
// easy as 1, 2, 3", SC'11) and Ember's counter scheme for rng-uniform and
// rng-normal. Header-only and dependency-free so that generated code and the
// torch bridge can reproduce the interpreter's draws bit for bit.
//
// Counter scheme. A draw of N elements by an rng op with seed s (u64),
// offset o (u64) and attribute `stream` t reads a flat sequence of 32-bit
// words; word j is lane (j mod 4) of the Philox-4x32-10 block
//   key     = (s mod 2^32, s >> 32)
//   counter = (b mod 2^32, (b >> 32) xor (t mod 2^32), o mod 2^32, o >> 32)
// with b = j / 4. Element i consumes the W consecutive words W*i .. W*i+W-1,
// where W = EmberRngWordsPerElement(normal, is_f64):
//   uniform f16/bf16/f32: 1 word  -> (w >> 8) * 2^-24, in [0, 1)
//   uniform f64:          2 words -> ((w0 << 32 | w1) >> 11) * 2^-53
//   normal  f16/bf16/f32: 2 words -> Box-Muller in f32 from u1 = 1 - U(w0)
//                                    (in (0, 1], so log never sees 0), u2 = U(w1)
//   normal  f64:          4 words -> Box-Muller in f64, u1 from (w0, w1), u2 from (w2, w3)
// so element i is a pure function of (s, o, i, t); draws of different streams
// never share a counter while they use fewer than 2^32 blocks (2^34 words).
// Box-Muller keeps only the cosine branch: z = sqrt(-2 log u1) cos(2 pi u2).
// f16/bf16 results are computed in f32 and rounded to nearest even; a uniform
// that would round up to 1.0 is clamped to the largest value below 1.
#pragma once

#include <array>
#include <cstdint>

namespace ember {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

constexpr PhiloxCounter PhiloxRound(const PhiloxCounter& c, const PhiloxKey& k) {
  uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
  uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
  return {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
}

// Ten rounds; the key is bumped (Weyl sequence) between rounds.
constexpr PhiloxCounter Philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    c = PhiloxRound(c, k);
  }
  return c;
}

// Block b of the draw (seed, offset, stream); see the counter scheme above.
constexpr PhiloxCounter EmberRngBlock(uint64_t seed, uint64_t offset, int64_t stream,
                                      uint64_t block) {
  PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  PhiloxCounter ctr = {static_cast<uint32_t>(block),
                       static_cast<uint32_t>(block >> 32) ^ static_cast<uint32_t>(stream),
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)};
  return Philox4x32_10(ctr, key);
}

// Words consumed per element: 1 (uniform, 16/32-bit float), 2 (uniform f64
// or normal 16/32-bit float), 4 (normal f64).
constexpr int EmberRngWordsPerElement(bool normal, bool is_f64) {
  return (normal ? 2 : 1) * (is_f64 ? 2 : 1);
}

// Word j of the draw (one Philox call per word; callers that want speed keep
// the block).
constexpr uint32_t EmberRngWord(uint64_t seed, uint64_t offset, int64_t stream, uint64_t j) {
  return EmberRngBlock(seed, offset, stream, j / 4)[j % 4];
}

// [0, 1) from the top 24 bits of one word (exact in f32).
constexpr float UniformFloatFromBits(uint32_t w) {
  return static_cast<float>(w >> 8) * (1.0f / 16777216.0f);
}
// [0, 1) from the top 53 bits of (hi << 32 | lo) (exact in f64).
constexpr double UniformDoubleFromBits(uint32_t hi, uint32_t lo) {
  uint64_t x = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace ember

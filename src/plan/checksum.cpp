#include <cstring>

#include "plan/plan.h"

namespace sampan::plan {

namespace {
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
inline uint64_t Rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
inline uint64_t Round(uint64_t acc, uint64_t w) {
  return Rotl(acc + w * kP2, 31) * kP1;
}
}  // namespace

uint64_t Hash64(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  // Four independent lanes keep the multiplier pipeline busy.
  uint64_t lanes[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      lanes[l] = Round(lanes[l], w);
    }
  }
  uint64_t h = Rotl(lanes[0], 1) + Rotl(lanes[1], 7) + Rotl(lanes[2], 12) + Rotl(lanes[3], 18);
  h += size;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = Rotl(h ^ Round(0, w), 27) * kP1 + kP3;
  }
  for (; i < size; ++i) h = Rotl(h ^ (p[i] * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace sampan::plan

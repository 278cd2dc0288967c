// FNV-1a, 64 bits: a checksum of bytes and of numbers (each as its little-endian bytes, so the
// value is the same on every host). Used where a file or a message names its content: the
// agent's table file, a policy model, the stubs a compact route table leaves out. Not for
// anything an adversary chooses.
#ifndef DAR_BASE_FNV_H_
#define DAR_BASE_FNV_H_

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace dar {

class Fnv1a64 {
 public:
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= b[i];
      h_ *= 0x100000001b3ULL;
    }
  }
  void Bytes(std::string_view s) { Bytes(s.data(), s.size()); }
  void Int(int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) {
      b[i] = static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i));
    }
    Bytes(b, 8);
  }
  void Float(float v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    unsigned char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(bits >> (8 * i));
    Bytes(b, 4);
  }
  void Double(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, 8);
    Int(static_cast<int64_t>(bits));
  }
  void Floats(const std::vector<float>& v) {
    for (float x : v) Float(x);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

inline uint64_t Fnv1a64Of(std::string_view data) {
  Fnv1a64 h;
  h.Bytes(data);
  return h.value();
}

}  // namespace dar

#endif  // DAR_BASE_FNV_H_

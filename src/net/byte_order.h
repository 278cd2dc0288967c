// Big-endian (network byte order) loads and stores on byte buffers, for the wire formats in
// src/net. REQUIRES: the buffer holds the bytes read or written; no bounds are checked here.
#ifndef DAR_NET_BYTE_ORDER_H_
#define DAR_NET_BYTE_ORDER_H_

#include <cstdint>

namespace dar::net {

inline uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
inline uint32_t Load32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | p[3];
}
inline uint64_t Load64(const uint8_t* p) {
  return (static_cast<uint64_t>(Load32(p)) << 32) | Load32(p + 4);
}

inline void Store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void Store32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
inline void Store64(uint8_t* p, uint64_t v) {
  Store32(p, static_cast<uint32_t>(v >> 32));
  Store32(p + 4, static_cast<uint32_t>(v));
}

}  // namespace dar::net

#endif  // DAR_NET_BYTE_ORDER_H_

// A file descriptor owned by one object and closed when it goes away.
#ifndef DAR_NET_SCOPED_FD_H_
#define DAR_NET_SCOPED_FD_H_

#include <unistd.h>

#include <utility>

namespace dar::net {

class ScopedFd {
 public:
  ScopedFd() = default;
  // Takes ownership of `fd` (-1 for none).
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes the descriptor held (if any) and holds `fd` instead.
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  // Gives up ownership without closing.
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

}  // namespace dar::net

#endif  // DAR_NET_SCOPED_FD_H_

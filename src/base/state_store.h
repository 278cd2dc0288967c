// Where a daemon keeps the small documents that must outlive it (the controller's operator
// state and its data-plane key ring): files in a state directory, or keys in etcd for the
// replicas of a highly available controller (control/leadership.h), which must all see the
// same ones. Each document is read and replaced whole.
#ifndef DAR_BASE_STATE_STORE_H_
#define DAR_BASE_STATE_STORE_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dar {

class StateStore {
 public:
  // The bound on a document.
  static constexpr size_t kMaxDocumentBytes = size_t{1} << 20;

  virtual ~StateStore() = default;
  // The document `name`, or nullopt if there is none. Errors name Where(name).
  virtual absl::StatusOr<std::optional<std::string>> Read(const std::string& name) = 0;
  // Replaces the document `name` whole: a reader sees the old one or the new one, never a part.
  // Errors name Where(name); the document is then as it was.
  virtual absl::Status Write(const std::string& name, std::string_view text) = 0;
  // Where the document lives, for messages: "state/operator.json".
  virtual std::string Where(const std::string& name) const = 0;
};

// Documents as files of mode 0600 in a directory, made on the first write.
class DirectoryStateStore final : public StateStore {
 public:
  explicit DirectoryStateStore(std::string dir) : dir_(std::move(dir)) {}
  absl::StatusOr<std::optional<std::string>> Read(const std::string& name) override;
  absl::Status Write(const std::string& name, std::string_view text) override;
  std::string Where(const std::string& name) const override { return dir_ + "/" + name; }

 private:
  std::string dir_;
};

}  // namespace dar

#endif  // DAR_BASE_STATE_STORE_H_

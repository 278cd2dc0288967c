// Debian's abseil ships no status_macros.h; these are the two the code base uses.
#ifndef DAR_BASE_STATUS_MACROS_H_
#define DAR_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DAR_CONCAT_INNER_(a, b) a##b
#define DAR_CONCAT_(a, b) DAR_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status dar_status_ = (expr);       \
    if (!dar_status_.ok()) return dar_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` declares x from an absl::StatusOr, or returns its error.
// `lhs` is a declaration, which parentheses would break.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(DAR_CONCAT_(dar_statusor_, __LINE__), lhs, rexpr)
#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // DAR_BASE_STATUS_MACROS_H_

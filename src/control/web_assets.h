// The controller's web view (web/): the files vite builds, compiled into the binary so the
// controller serves them with nothing read or downloaded at run time. The definition is
// generated at build time from web/dist (web/CMakeLists.txt, library dar_web_assets).
#ifndef DAR_CONTROL_WEB_ASSETS_H_
#define DAR_CONTROL_WEB_ASSETS_H_

#include <string_view>

#include "absl/types/span.h"

namespace dar::control {

struct WebAsset {
  std::string_view path;          // as requested: "/index.html", "/assets/index-3f2a.js"
  std::string_view content_type;  // "text/html; charset=utf-8", "text/javascript", ...
  std::string_view body;
};

// Every file of the built web view, in no particular order.
absl::Span<const WebAsset> WebAssets();

}  // namespace dar::control

#endif  // DAR_CONTROL_WEB_ASSETS_H_

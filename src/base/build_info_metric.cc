#include "base/build_info_metric.h"

#include <utility>

#include "base/version.h"

namespace dar {

prometheus::MetricFamily BuildInfoFamily(const std::string& program) {
  prometheus::MetricFamily f{
      "dar_build_info",
      "1, labelled with the binary's version and the commit it was built from",
      prometheus::MetricType::Gauge,
      {}};
  prometheus::ClientMetric m;
  m.label = {{"commit", std::string(BuildCommit())},
             {"program", program},
             {"version", std::string(Version())}};
  m.gauge.value = 1;
  f.metric.push_back(std::move(m));
  return f;
}

}  // namespace dar

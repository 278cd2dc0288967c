// The build-info metric every daemon exports: dar_build_info{program, version, commit} 1, as
// Prometheus' convention for a binary's version is (a constant gauge whose labels carry it).
#ifndef DAR_BASE_BUILD_INFO_METRIC_H_
#define DAR_BASE_BUILD_INFO_METRIC_H_

#include <string>

#include "prometheus/metric_family.h"

namespace dar {

// The family for the binary `program` (base/version.h gives the version and commit).
prometheus::MetricFamily BuildInfoFamily(const std::string& program);

}  // namespace dar

#endif  // DAR_BASE_BUILD_INFO_METRIC_H_

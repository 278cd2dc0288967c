// A message as JSON for people and scripts (darctl -j, the controller's web API): proto field
// names, every field (zero values too), every integer a JSON number (protobuf's own printer
// quotes 64-bit ones as strings), enums by name. A non-finite double is a string ("Infinity",
// "-Infinity", "NaN"), as protobuf's JSON mapping has it; an unset message field is null. A
// 64-bit integer above 2^53 (the Unix nanosecond stamps) is exact in the text but not in a
// JavaScript number. Maps and oneofs are not mapped (the admin API has none): a map comes out
// as a list of {key, value} entries.
#ifndef DAR_WIRE_PROTO_JSON_H_
#define DAR_WIRE_PROTO_JSON_H_

#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace dar::wire {

nlohmann::json ToJson(const google::protobuf::Message& m);

}  // namespace dar::wire

#endif  // DAR_WIRE_PROTO_JSON_H_

#include "wire/proto_json.h"

#include <cmath>

namespace dar::wire {

nlohmann::json ToJson(const google::protobuf::Message& m) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  nlohmann::json out = nlohmann::json::object();
  const auto number = [](double v) -> nlohmann::json {
    if (std::isfinite(v)) return v;
    if (std::isnan(v)) return "NaN";
    return v > 0 ? "Infinity" : "-Infinity";
  };
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const auto one = [&](int index) -> nlohmann::json {
      const bool rep = f->is_repeated();
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
          return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
        case FieldDescriptor::CPPTYPE_INT64:
          return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
        case FieldDescriptor::CPPTYPE_UINT32:
          return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
        case FieldDescriptor::CPPTYPE_UINT64:
          return rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
        case FieldDescriptor::CPPTYPE_DOUBLE:
          return number(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
        case FieldDescriptor::CPPTYPE_FLOAT:
          return number(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
        case FieldDescriptor::CPPTYPE_BOOL:
          return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
        case FieldDescriptor::CPPTYPE_ENUM:
          return (rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name();
        case FieldDescriptor::CPPTYPE_STRING:
          return rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
        case FieldDescriptor::CPPTYPE_MESSAGE:
          return ToJson(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
      }
      return nullptr;
    };
    if (f->is_repeated()) {
      nlohmann::json list = nlohmann::json::array();
      for (int k = 0; k < r->FieldSize(m, f); ++k) list.push_back(one(k));
      out[f->name()] = std::move(list);
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !r->HasField(m, f)) {
      out[f->name()] = nullptr;  // unset, not a message of zeros
    } else {
      out[f->name()] = one(0);
    }
  }
  return out;
}

}  // namespace dar::wire

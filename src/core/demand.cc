#include "core/demand.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "core/topology_json.h"
#include "nlohmann/json.hpp"

namespace dar {
namespace {

using Json = nlohmann::json;

// 1-based line and column of byte `offset` of `text`.
std::pair<size_t, size_t> LineColumn(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// A character iterator that tells where the parser last read: nlohmann's SAX events carry no
// position, so the handler reads it from here.
class TrackingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** last_read) : p_(p), last_read_(last_read) {}
  reference operator*() const {
    *last_read_ = p_;
    return *p_;
  }
  TrackingIterator& operator++() {
    ++p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++p_;
    return old;
  }
  friend bool operator==(const TrackingIterator& a, const TrackingIterator& b) {
    return a.p_ == b.p_;
  }

 private:
  const char* p_;
  const char** last_read_;
};

// JSON Pointer (RFC 6901) escaping of one reference token.
std::string PointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// A SAX pass that checks the syntax without exceptions and records, for every value, the byte
// offset where it starts (for an object member, where its key is) by JSON Pointer, and which
// pointers name a key repeated in its object.
class PositionRecorder : public nlohmann::json_sax<Json> {
 public:
  PositionRecorder(const char* begin, const char** last_read)
      : begin_(begin), last_read_(last_read) {}

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override {
    frames_.push_back({ValuePath(), false, 0, ""});
    return true;
  }
  bool key(string_t& key) override {
    Frame& top = frames_.back();
    top.key = key;
    const std::string path = absl::StrCat(top.path, "/", PointerToken(key));
    if (!offsets_.try_emplace(path, Offset()).second) duplicates_.try_emplace(path, Offset());
    return true;
  }
  bool end_object() override {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    frames_.push_back({ValuePath(), true, 0, ""});
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    error_offset_ = position;
    // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ...":
    // keep what follows the position, which the caller states itself.
    std::string message = e.what();
    const size_t colon = message.find(": ");
    error_ = colon == std::string::npos ? message : message.substr(colon + 2);
    return false;
  }

  // Where the value at `pointer` starts; 0 if unknown.
  size_t OffsetOf(const std::string& pointer) const {
    auto it = offsets_.find(pointer);
    return it == offsets_.end() ? 0 : it->second;
  }
  // Repeated keys: pointer -> offset of the first repetition.
  const std::map<std::string, size_t>& duplicates() const { return duplicates_; }
  size_t error_offset() const { return error_offset_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    std::string path;
    bool array;
    size_t index;
    std::string key;
  };

  size_t Offset() const { return *last_read_ == nullptr ? 0 : *last_read_ - begin_; }

  // The pointer of the value being read now; records array elements (members were recorded at
  // their key).
  std::string ValuePath() {
    if (frames_.empty()) return "";
    Frame& top = frames_.back();
    if (!top.array) return absl::StrCat(top.path, "/", PointerToken(top.key));
    std::string path = absl::StrCat(top.path, "/", top.index++);
    offsets_.try_emplace(path, Offset());
    return path;
  }
  bool Value() {
    ValuePath();
    return true;
  }

  const char* begin_;
  const char** last_read_;
  std::vector<Frame> frames_;
  std::unordered_map<std::string, size_t> offsets_;
  std::map<std::string, size_t> duplicates_;
  size_t error_offset_ = 0;
  std::string error_;
};

// A node id as a string: strings as they are, integers in decimal (as topology_json reads
// node ids).
bool IdToString(const Json& id, std::string& out) {
  if (id.is_string()) {
    out = id.get<std::string>();
  } else if (id.is_number_unsigned()) {
    out = std::to_string(id.get<uint64_t>());
  } else if (id.is_number_integer()) {
    out = std::to_string(id.get<int64_t>());
  } else {
    return false;
  }
  return true;
}

class MatrixReader {
 public:
  MatrixReader(std::string_view text, const std::string& name, const Topology& topo,
               const PositionRecorder& positions)
      : text_(text), name_(name), topo_(topo), positions_(positions) {
    for (NodeId n : topo.Endpoints()) endpoints_.insert(n);
  }

  absl::StatusOr<std::vector<Demand>> Read(const Json& doc) {
    if (doc.is_object() && doc.contains("graph") && doc["graph"].is_object() &&
        doc["graph"].contains("demands")) {
      RETURN_IF_ERROR(ReadNested(doc["graph"]["demands"], "/graph/demands"));
    } else if (doc.is_object() && doc.contains("nodes")) {
      return Error("", "a node-link topology file without graph.demands holds no matrix");
    } else if (doc.is_object()) {
      RETURN_IF_ERROR(ReadNested(doc, ""));
    } else if (doc.is_array()) {
      RETURN_IF_ERROR(ReadList(doc));
    } else {
      return Error("",
                   "a demand matrix is an object (source -> destination -> demand) or a "
                   "list of {\"src\", \"dst\", \"demand\"}");
    }
    std::vector<Demand> out;
    for (const auto& [pair, amount] : amounts_) {
      if (amount > 0) out.push_back({pair.first, pair.second, amount});
    }
    if (out.empty()) return Error(root_, "the matrix has no positive demand");
    return out;
  }

 private:
  absl::Status Error(const std::string& pointer, const std::string& problem) const {
    return ErrorAt(positions_.OffsetOf(pointer), pointer, problem);
  }
  absl::Status ErrorAt(size_t offset, const std::string& pointer,
                       const std::string& problem) const {
    if (pointer.empty()) return absl::InvalidArgumentError(absl::StrCat(name_, ": ", problem));
    const size_t line = LineColumn(text_, offset).first;
    return absl::InvalidArgumentError(absl::StrCat(name_, ":", line, ": ", pointer, ": ", problem));
  }

  absl::StatusOr<NodeId> Endpoint(const std::string& id, const std::string& pointer,
                                  const char* role) const {
    absl::StatusOr<NodeId> n = topo_.FindNode(id);
    if (!n.ok()) {
      return Error(pointer, absl::StrCat(role, " '", id, "' is not a node of the topology"));
    }
    if (!endpoints_.contains(*n)) {
      return Error(pointer, absl::StrCat(role, " '", id, "' is not an endpoint of the topology"));
    }
    return *n;
  }

  absl::Status Add(NodeId src, NodeId dst, const Json& amount, const std::string& pointer) {
    if (!amount.is_number()) {
      return Error(pointer, absl::StrCat("demand must be a number, got ", amount.dump()));
    }
    const double value = amount.get<double>();
    if (!std::isfinite(value)) return Error(pointer, "demand must be finite");
    if (value < 0) return Error(pointer, absl::StrCat("demand must not be negative, got ", value));
    if (src == dst && value > 0) {
      return Error(pointer,
                   absl::StrCat("demand from node '", topo_.node(src).name, "' to itself"));
    }
    if (!amounts_.try_emplace({src, dst}, value).second) {
      return Error(pointer, absl::StrCat("the pair '", topo_.node(src).name, "' -> '",
                                         topo_.node(dst).name, "' is given twice"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckNoRepeatedKey(const std::string& pointer) const {
    for (const auto& [dup, offset] : positions_.duplicates()) {
      if (dup.size() > pointer.size() && dup.compare(0, pointer.size(), pointer) == 0 &&
          dup[pointer.size()] == '/') {
        return ErrorAt(offset, dup, "key repeated in its object (the pair is given twice)");
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadNested(const Json& matrix, const std::string& pointer) {
    root_ = pointer;
    if (!matrix.is_object()) {
      return Error(pointer, "must be an object: source -> destination -> demand");
    }
    RETURN_IF_ERROR(CheckNoRepeatedKey(pointer));
    for (const auto& [src_id, row] : matrix.items()) {
      const std::string src_pointer = absl::StrCat(pointer, "/", PointerToken(src_id));
      ASSIGN_OR_RETURN(const NodeId src, Endpoint(src_id, src_pointer, "source"));
      if (!row.is_object()) {
        return Error(src_pointer, "must be an object: destination -> demand");
      }
      for (const auto& [dst_id, amount] : row.items()) {
        const std::string dst_pointer = absl::StrCat(src_pointer, "/", PointerToken(dst_id));
        ASSIGN_OR_RETURN(const NodeId dst, Endpoint(dst_id, dst_pointer, "destination"));
        RETURN_IF_ERROR(Add(src, dst, amount, dst_pointer));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadList(const Json& list) {
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string pointer = absl::StrCat("/", i);
      const Json& entry = list[i];
      if (!entry.is_object()) {
        return Error(pointer, "must be an object {\"src\": ID, \"dst\": ID, \"demand\": X}");
      }
      NodeId ends[2];
      const char* keys[2] = {"src", "dst"};
      const char* roles[2] = {"source", "destination"};
      for (int k = 0; k < 2; ++k) {
        const std::string key_pointer = absl::StrCat(pointer, "/", keys[k]);
        if (!entry.contains(keys[k])) {
          return Error(pointer, absl::StrCat("has no \"", keys[k], "\""));
        }
        std::string id;
        if (!IdToString(entry[keys[k]], id)) {
          return Error(key_pointer,
                       absl::StrCat(keys[k], " must be a node id, got ", entry[keys[k]].dump()));
        }
        ASSIGN_OR_RETURN(ends[k], Endpoint(id, key_pointer, roles[k]));
      }
      if (!entry.contains("demand")) return Error(pointer, "has no \"demand\"");
      RETURN_IF_ERROR(Add(ends[0], ends[1], entry["demand"], absl::StrCat(pointer, "/demand")));
    }
    return absl::OkStatus();
  }

  std::string_view text_;
  const std::string& name_;
  const Topology& topo_;
  const PositionRecorder& positions_;
  std::set<NodeId> endpoints_;
  std::map<std::pair<NodeId, NodeId>, double> amounts_;
  std::string root_;
};

}  // namespace

std::vector<double> GravityWeights(const Topology& topo) {
  const std::vector<NodeId> endpoints = topo.Endpoints();
  const bool given = std::all_of(endpoints.begin(), endpoints.end(),
                                 [&](NodeId n) { return topo.node(n).weight.has_value(); });
  std::vector<double> weights(topo.num_nodes(), 0.0);
  for (NodeId n = 0; n < topo.num_nodes(); ++n) {
    const Node& node = topo.node(n);
    if (given && node.weight) {
      weights[n] = *node.weight;
      continue;
    }
    std::set<NodeId> neighbours;
    for (LinkId l : node.out_links) neighbours.insert(topo.link(l).dst);
    for (LinkId l : node.in_links) neighbours.insert(topo.link(l).src);
    weights[n] = static_cast<double>(neighbours.size());
  }
  return weights;
}

absl::StatusOr<std::vector<Demand>> GravityDemand(const Topology& topo) {
  const std::vector<NodeId> endpoints = topo.Endpoints();
  const std::vector<double> weights = GravityWeights(topo);
  double sum = 0, sum_squares = 0;
  for (NodeId n : endpoints) {
    sum += weights[n];
    sum_squares += weights[n] * weights[n];
  }
  const double products = sum * sum - sum_squares;  // sum over ordered pairs s != d
  const double n = static_cast<double>(endpoints.size());
  if (!(products > 0)) {
    return absl::InvalidArgumentError(
        "gravity demand needs at least two endpoints of positive weight");
  }
  const double scale = n * (n - 1) / products;
  std::vector<Demand> out;
  for (NodeId src : endpoints) {
    for (NodeId dst : endpoints) {
      const double amount = weights[src] * weights[dst] * scale;
      if (src != dst && amount > 0) out.push_back({src, dst, amount});
    }
  }
  return out;
}

absl::StatusOr<std::vector<Demand>> ParseDemandMatrix(std::string_view text,
                                                      const std::string& name,
                                                      const Topology& topo) {
  const char* last_read = nullptr;
  PositionRecorder positions(text.data(), &last_read);
  const bool parsed =
      Json::sax_parse(TrackingIterator(text.data(), &last_read),
                      TrackingIterator(text.data() + text.size(), &last_read), &positions);
  if (!parsed) {
    const auto [line, column] =
        LineColumn(text, positions.error_offset() == 0 ? 0 : positions.error_offset() - 1);
    return absl::InvalidArgumentError(
        absl::StrCat(name, ":", line, ":", column, ": not valid JSON: ", positions.error()));
  }
  const Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(name, ": not valid JSON"));
  return MatrixReader(text, name, topo, positions).Read(doc);
}

absl::StatusOr<std::vector<Demand>> LoadDemandMatrix(const std::string& path,
                                                     const Topology& topo) {
  // A file that cannot be read is bad input like any other (InvalidArgument, naming it).
  absl::StatusOr<std::string> read = ReadFile(path);
  if (!read.ok()) return absl::InvalidArgumentError(read.status().message());
  const std::string text = std::move(*read);
  return ParseDemandMatrix(text, path, topo);
}

double TotalDemand(const std::vector<Demand>& demands) {
  double total = 0;
  for (const Demand& d : demands) total += d.amount;
  return total;
}

}  // namespace dar

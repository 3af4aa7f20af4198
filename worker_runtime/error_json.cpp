#include "worker_runtime/error_json.hpp"

#include <nlohmann/json.hpp>

namespace rankrun::worker {
namespace {

using Json = nlohmann::json;

// A JSON string literal of `text`, invalid UTF-8 replaced rather than refused.
std::string string_literal(std::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

const Json* member(const Json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

// A field's text: a string as it is, another scalar as written (a number's digits); nothing
// for a missing field, an object or an array.
std::string text_of(const Json* value) {
  if (value == nullptr || value->is_structured()) return {};
  if (value->is_string()) return value->get<std::string>();
  return value->dump();
}

}  // namespace

std::string format_error_json(const ErrorRecord& record) {
  // torch's json.dump separators (", " and ": "), in its order of fields.
  std::string out = "{\"message\": {\"message\": ";
  out += string_literal(record.message);
  out += ", \"extraInfo\": {\"py_callstack\": ";
  out += string_literal(record.traceback);
  out += ", \"timestamp\": ";
  out += string_literal(record.timestamp);
  out += "}}}\n";
  return out;
}

std::optional<ErrorRecord> parse_error_json(std::string_view text) {
  // nlohmann's parser keeps its own stack; the callback bounds the nesting.
  bool too_deep = false;
  const auto bound = [&too_deep](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        static_cast<std::size_t>(depth) >= k_error_json_max_depth) {
      too_deep = true;
    }
    return !too_deep;
  };
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end(), bound, /*allow_exceptions=*/false);
  } catch (const Json::exception&) {
    return std::nullopt;
  }
  if (too_deep || doc.is_discarded()) return std::nullopt;
  const Json* message = member(doc, "message");
  if (message == nullptr) return std::nullopt;
  ErrorRecord record;
  if (message->is_string()) {
    record.message = message->get<std::string>();
    record.timestamp = text_of(member(doc, "timestamp"));
    return record;
  }
  if (!message->is_object()) return std::nullopt;
  record.message = text_of(member(*message, "message"));
  if (const Json* extra = member(*message, "extraInfo")) {
    record.traceback = text_of(member(*extra, "py_callstack"));
    record.timestamp = text_of(member(*extra, "timestamp"));
  }
  return record;
}

std::string failure_message(std::string_view type, std::string_view what) {
  std::string out(type);
  if (!what.empty()) {
    out += ": ";
    out += what;
  }
  return out;
}

}  // namespace rankrun::worker

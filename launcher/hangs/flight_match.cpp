#include "launcher/hangs/flight_match.hpp"

#include "base/parse_number.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "launcher/report/arrival.hpp"

namespace rankrun::launcher {
namespace {

using Json = nlohmann::json;
constexpr int k_max_depth = 16;
constexpr std::size_t k_max_entries = 1u << 20;

// A sequence id as torch writes it: a number, or a number in a string (pg_status).
std::optional<std::int64_t> seq_of(const Json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return parse_number<std::int64_t>(s);
  }
  return std::nullopt;
}

std::string text_of(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return {};
  return v.dump();
}

// [[4, 4]] -> "[[4, 4]]"; ["Float", "Float"] -> "Float, Float"
std::string sizes_text(const Json& v) {
  if (!v.is_array()) return {};
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    const auto& dims = v[i];
    if (!dims.is_array()) return v.dump();
    out += "[";
    for (std::size_t j = 0; j < dims.size(); ++j) out += (j ? ", " : "") + text_of(dims[j]);
    out += "]";
  }
  return out + "]";
}

std::string dtypes_text(const Json& v) {
  if (!v.is_array()) return {};
  std::string out;
  for (const auto& d : v) out += (out.empty() ? "" : ", ") + text_of(d);
  return out;
}

bool is_default(const std::string& group, const std::string& desc) {
  return desc == "default_pg" || (desc.empty() && group == "0");
}

std::string group_text(const std::string& group, const std::string& desc) {
  if (is_default(group, desc)) return "the default group";
  return desc.empty() || desc == "undefined" ? "group " + group : fmt::format("group {} ({})", group, desc);
}

// "all_reduce #12" or "#12" when the entry is not known.
std::string collective_text(const FlightEntry* e, std::int64_t seq) {
  return e ? fmt::format("{} #{}", e->op, seq) : fmt::format("#{}", seq);
}

struct Member {
  int rank;
  const FlightGroup* status;
  const std::string* at;
  std::map<std::int64_t, const FlightEntry*> entries;  // the group's, by sequence id
};

const FlightEntry* entry_of(const Member& m, std::int64_t seq) {
  const auto it = m.entries.find(seq);
  return it == m.entries.end() ? nullptr : it->second;
}

std::string where_text(const Member& m) { return m.at->empty() ? std::string() : " (now at " + *m.at + ")"; }

std::string has(const std::vector<int>& ranks, const char* one, const char* many) {
  return ranks.size() == 1 ? one : many;
}

// The members that share the most common signature are the majority; the others part from it.
// Ties: the group holding the lowest rank is taken as the majority.
std::optional<FlightFinding> mismatch_at(const std::string& group, const std::string& desc, std::int64_t seq,
                                         const std::vector<Member>& members) {
  std::map<std::string, std::vector<int>> by_signature;
  std::map<std::string, const FlightEntry*> example;
  bool sizes_known = true;  // sizes and dtypes are compared only where every member's are known
  for (const auto& m : members) {
    const auto* e = entry_of(m, seq);
    if (!e) return std::nullopt;  // not every member still has it: cannot compare here
    sizes_known &= e->sizes_known;
  }
  for (const auto& m : members) {
    const auto* e = entry_of(m, seq);
    const auto signature = !sizes_known ? e->op
                           : e->sizes.empty() || e->sizes == "[]"
                               ? e->op + " (no tensors)"
                               : fmt::format("{} ({} {})", e->op, e->sizes, e->dtypes);
    by_signature[signature].push_back(m.rank);
    example[signature] = e;
  }
  if (by_signature.size() < 2) return std::nullopt;
  auto majority = by_signature.begin();
  for (auto it = by_signature.begin(); it != by_signature.end(); ++it) {
    if (it->second.size() > majority->second.size() ||
        (it->second.size() == majority->second.size() && it->second.front() < majority->second.front())) {
      majority = it;
    }
  }
  FlightFinding f{group, seq, {}, {}};
  f.even = std::count_if(by_signature.begin(), by_signature.end(),
                         [&](const auto& kv) { return kv.second.size() == majority->second.size(); }) > 1;
  // Said in the order of each side's lowest rank.
  std::vector<std::pair<std::vector<int>, std::string>> sides;
  for (const auto& [signature, ranks] : by_signature) {
    sides.emplace_back(ranks, signature);
    if (signature != majority->first) f.look_first.insert(f.look_first.end(), ranks.begin(), ranks.end());
  }
  std::sort(sides.begin(), sides.end());
  std::string parts;
  for (const auto& [ranks, signature] : sides)
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", ranks_text(ranks), signature);
  std::sort(f.look_first.begin(), f.look_first.end());
  const bool same_op = std::all_of(example.begin(), example.end(),
                                   [&](const auto& kv) { return kv.second->op == example.begin()->second->op; });
  f.text = fmt::format("at collective #{} of {} the ranks run different {}: {}", seq, group_text(group, desc),
                       same_op ? "sizes or dtypes" : "collectives", parts);
  return f;
}

std::optional<FlightFinding> match_group(const std::string& group, const std::vector<Member>& members) {
  if (members.size() < 2) return std::nullopt;
  std::string desc;
  for (const auto& m : members) {
    for (const auto& [seq, e] : m.entries) {
      if (!e->desc.empty()) desc = e->desc;
    }
  }
  std::int64_t lo = members.front().status->enqueued, hi = lo;
  for (const auto& m : members) {
    lo = std::min(lo, m.status->enqueued);
    hi = std::max(hi, m.status->enqueued);
  }
  // The first collective that some members ran differently, up to where all of them got, from
  // the first that every member's ring still holds.
  std::int64_t first_common = 1;
  for (const auto& m : members) {
    first_common = std::max(first_common, m.entries.empty() ? lo + 1 : m.entries.begin()->first);
  }
  for (std::int64_t seq = first_common; seq <= lo; ++seq) {
    if (auto f = mismatch_at(group, desc, seq, members)) return f;
  }
  if (lo < hi) {
    // Some members never enqueued collective lo + 1, which the others did.
    const std::int64_t seq = lo + 1;
    std::vector<int> ahead, behind;
    const FlightEntry* what = nullptr;
    bool all_in_it = true;
    for (const auto& m : members) {
      if (m.status->enqueued >= seq) {
        ahead.push_back(m.rank);
        if (!what) what = entry_of(m, seq);
        if (m.status->completed >= seq) all_in_it = false;
      } else {
        behind.push_back(m.rank);
      }
    }
    FlightFinding f{group, seq, {}, behind};
    std::string behind_text;
    for (const auto& m : members) {
      if (m.status->enqueued >= seq) continue;
      const auto last = m.status->enqueued;
      const auto* e = last > 0 ? entry_of(m, last) : nullptr;
      const auto its_last =
          last > 0 ? "its last was " + collective_text(e, last) : std::string("it enqueued none in it");
      behind_text += fmt::format("{}rank {} never enqueued it, {}{}", behind_text.empty() ? "" : "; ", m.rank, its_last,
                                 where_text(m));
      if (behind.size() > 4 && behind_text.size() > 400) {
        behind_text += "; ...";
        break;
      }
    }
    f.text = fmt::format("{} {} {} of {}; {}", ranks_text(ahead),
                         all_in_it ? has(ahead, "is in", "are in") : has(ahead, "reached", "reached"),
                         collective_text(what, seq), group_text(group, desc), behind_text);
    return f;
  }
  // Every member enqueued the same last collective: those that did not start it are behind.
  const std::int64_t seq = hi;
  if (seq <= 0) return std::nullopt;
  std::vector<int> not_completed, not_started, started;
  for (const auto& m : members) {
    if (m.status->completed >= seq) continue;
    not_completed.push_back(m.rank);
    if (m.status->started >= 0 && m.status->started < seq)
      not_started.push_back(m.rank);
    else if (m.status->started >= seq)
      started.push_back(m.rank);
  }
  if (not_completed.empty()) return std::nullopt;
  const FlightEntry* what = nullptr;
  for (const auto& m : members) {
    if (!what) what = entry_of(m, seq);
  }
  if (!not_started.empty() && !started.empty()) {
    FlightFinding f{group, seq, {}, not_started};
    f.text = fmt::format(
        "every rank enqueued {} of {}; {} started it, {} {} not started it (what runs before it on the "
        "device does not finish)",
        collective_text(what, seq), group_text(group, desc), ranks_text(started), ranks_text(not_started),
        has(not_started, "has", "have"));
    return f;
  }
  FlightFinding f{group, seq, {}, {}};
  f.text = fmt::format("{} {} in {} of {}, which every rank enqueued, and none completed it", ranks_text(not_completed),
                       has(not_completed, "is", "are"), collective_text(what, seq), group_text(group, desc));
  return f;
}

}  // namespace

std::optional<FlightDump> parse_flight_dump(std::string_view text, std::string& error) {
  if (text.size() > k_max_flight_dump) {
    error = fmt::format("{} bytes, more than {}", text.size(), k_max_flight_dump);
    return std::nullopt;
  }
  bool too_deep = false;
  const auto bound = [&too_deep](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= k_max_depth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  const Json doc = Json::parse(text.begin(), text.end(), bound, /*allow_exceptions=*/false);
  if (too_deep) {
    error = fmt::format("nested deeper than {}", k_max_depth);
    return std::nullopt;
  }
  if (doc.is_discarded() || !doc.is_object()) {
    error = "not a JSON object";
    return std::nullopt;
  }
  const auto status = doc.find("pg_status");
  if (status == doc.end() || !status->is_object()) {
    error = "no pg_status";
    return std::nullopt;
  }
  FlightDump d;
  for (const auto& [name, st] : status->items()) {
    if (!st.is_object()) continue;
    FlightGroup g;
    g.name = name;
    const auto get = [&st](const char* key) {
      const auto it = st.find(key);
      return it == st.end() ? std::nullopt : seq_of(*it);
    };
    const auto enq = get("last_enqueued_collective");
    if (!enq) continue;
    g.enqueued = *enq;
    g.started = get("last_started_collective").value_or(-1);
    g.completed = get("last_completed_collective").value_or(-1);
    d.groups.push_back(std::move(g));
  }
  if (const auto entries = doc.find("entries"); entries != doc.end() && entries->is_array()) {
    for (const auto& e : *entries) {
      if (!e.is_object() || d.entries.size() >= k_max_entries) continue;
      if (const auto p2p = e.find("is_p2p"); p2p != e.end() && p2p->is_boolean() && p2p->get<bool>()) continue;
      const auto seq = e.find("collective_seq_id");
      const auto pg = e.find("process_group");
      if (seq == e.end() || !seq_of(*seq) || pg == e.end() || !pg->is_array() || pg->empty()) continue;
      FlightEntry x;
      x.seq = *seq_of(*seq);
      x.group = text_of((*pg)[0]);
      if (pg->size() > 1) x.desc = text_of((*pg)[1]);
      const auto profiling = e.find("profiling_name");
      const std::string name = profiling == e.end() ? std::string() : text_of(*profiling);
      const auto colon = name.find(':');
      x.backend = colon == std::string::npos ? std::string() : name.substr(0, colon);
      x.op = colon == std::string::npos ? name : name.substr(colon + 1);
      if (const auto it = e.find("input_sizes"); it != e.end()) x.sizes = sizes_text(*it);
      if (const auto it = e.find("input_dtypes"); it != e.end()) x.dtypes = dtypes_text(*it);
      if (const auto it = e.find("state"); it != e.end()) x.state = text_of(*it);
      if (const auto it = e.find("retired"); it != e.end() && it->is_boolean()) x.retired = it->get<bool>();
      d.entries.push_back(std::move(x));
    }
  }
  std::map<std::string, std::set<std::int64_t>> retired_of;
  for (const auto& e : d.entries) {
    if (e.retired) retired_of[e.group].insert(e.seq);
  }
  for (auto& g : d.groups) {
    const auto& retired = retired_of[g.name];
    std::int64_t completed = std::max<std::int64_t>(g.completed, 0);
    while (completed < g.enqueued && retired.count(completed + 1)) ++completed;
    if (completed > std::max<std::int64_t>(g.completed, 0)) {
      g.completed = completed;
      if (g.started >= 0) g.started = std::max(g.started, completed);
    }
  }
  return d;
}

FlightDump merge_flight_dumps(FlightDump a, const FlightDump& b) {
  for (const auto& g : b.groups) {
    const auto same =
        std::find_if(a.groups.begin(), a.groups.end(), [&g](const FlightGroup& x) { return x.name == g.name; });
    if (same == a.groups.end()) {
      a.groups.push_back(g);
    } else if (g.enqueued > same->enqueued) {
      *same = g;
    }
  }
  a.entries.insert(a.entries.end(), b.entries.begin(), b.entries.end());
  return a;
}

FlightVerdict match_flight_dumps(const std::vector<RankFlight>& ranks) {
  FlightVerdict v;
  std::set<std::string> names;
  for (const auto& r : ranks) {
    if (!r.dump) {
      v.silent.push_back(r.rank);
      continue;
    }
    for (const auto& g : r.dump->groups) names.insert(g.name);
  }
  // The default group ("0") first, then by number where the names are numbers.
  std::vector<std::string> order(names.begin(), names.end());
  std::stable_sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
    const bool an = !a.empty() && std::all_of(a.begin(), a.end(), ::isdigit) && a.size() < 10;
    const bool bn = !b.empty() && std::all_of(b.begin(), b.end(), ::isdigit) && b.size() < 10;
    if (an && bn) return parse_number<int>(a) < parse_number<int>(b);
    return an && !bn;
  });
  std::vector<FlightFinding> quiet;  // every member in the same collective: said only when nothing parts
  for (const auto& name : order) {
    std::vector<Member> members;
    for (const auto& r : ranks) {
      if (!r.dump) continue;
      for (const auto& g : r.dump->groups) {
        if (g.name != name) continue;
        Member m{r.rank, &g, &r.at, {}};
        // The latest entry of a sequence id wins (a ring: older ones were overwritten).
        for (const auto& e : r.dump->entries) {
          if (e.group == name) m.entries[e.seq] = &e;
        }
        members.push_back(std::move(m));
      }
    }
    if (auto f = match_group(name, members)) {
      if (f->look_first.empty())
        quiet.push_back(std::move(*f));
      else
        v.findings.push_back(std::move(*f));
    }
  }
  if (v.findings.empty() && !quiet.empty()) v.findings.push_back(std::move(quiet.front()));
  return v;
}

std::string FlightVerdict::text() const {
  if (findings.empty()) return {};
  const auto& first = findings.front();
  std::string out = "Flight recorder: " + first.text + ".";
  if (!first.look_first.empty()) {
    out += fmt::format(
        " Look at {} first{}.", ranks_text(first.look_first),
        first.even ? " (the ranks split evenly; the side of the lowest rank is taken as the reference)" : "");
  }
  for (std::size_t i = 1; i < findings.size() && i < 4; ++i) out += " Also: " + findings[i].text + ".";
  if (!silent.empty()) {
    out += fmt::format(" No flight recorder dump came from {}.", ranks_text(silent));
  }
  return out;
}

}  // namespace rankrun::launcher

// Reading what was set: the TOML file and the --section.key=value overrides,
// each value checked against the list of keys (unknown sections and keys are
// errors naming the file line or the override) and remembered with where it
// was set; and the TOML text of strings, doubles and values.
#include "train/config_toml.h"

#include <toml++/toml.h>

#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/error.h"
#include "runtime/resource_limits.h"

namespace spmd::train::config_detail {

const Schema& schema() {
  static const Schema s = [] {
    Schema s;
    TrainConfig c;
    for_each_field(
        [&](const std::string& section, const std::string& key, auto& field) {
          if (s.keys.find(section) == s.keys.end()) s.sections.push_back(section);
          s.keys[section].push_back(key);
          s.is_string[section + "." + key] =
              std::is_same_v<std::decay_t<decltype(field)>, std::string>;
        },
        c);
    return s;
  }();
  return s;
}

std::string toml_string(const std::string& s);
std::string toml_double(double d);
std::string describe(const toml::node& value);
std::string join(const std::vector<std::string>& items, const char* quote);

void Settings::read_file(const std::string& path) {
  constexpr uint64_t kMaxConfigBytes = 16 << 20;  // a TOML config is a few KiB
  try {
    const std::string doc = read_file_bounded(path, "the config", 1, kMaxConfigBytes);
    docs_.push_back(toml::parse(std::string_view(doc), std::string_view(path)));
  } catch (const toml::parse_error& e) {
    SPMD_THROW(InvalidArgument, path, ":", e.source().begin.line, ":", e.source().begin.column,
               ": ", e.description());
  }
  const Schema& s = schema();
  for (auto&& [section, table] : docs_.back()) {
    const std::string name(section.str());
    const std::string at = str_cat(path, ":", section.source().begin.line, ": ");
    const std::string sections = " (sections: " + join(s.sections, "") + ")";
    if (!s.keys.count(name)) {
      SPMD_CHECK(!table.is_table(), at, "unknown section [", name, "]", sections);
      SPMD_THROW(InvalidArgument, at, "unknown key '", name, "' (keys go in a [section])",
                 sections);
    }
    SPMD_CHECK(table.is_table(), at, "'", name, "' must be a table ([", name, "])");
    for (auto&& [key, value] : *table.as_table()) {
      const std::string full = name + "." + std::string(key.str());
      SPMD_CHECK(s.is_string.count(full), path, ":", key.source().begin.line, ": unknown key '",
                 full, "' (", name, " has ", join(s.keys.at(name), ""), ")");
      by_key_[full] = {&value, str_cat(path, ":", value.source().begin.line)};
    }
  }
}

// "section.key=value" or "--section.key=value". The value is TOML (2, 3e-4,
// true, "text"); for a string key, bare text is the string itself.
void Settings::read_override(const std::string& text) {
  const std::string arg = text.rfind("--", 0) == 0 ? text.substr(2) : text;
  const std::string where = "override --" + arg;
  const size_t eq = arg.find('=');
  SPMD_CHECK(eq != std::string::npos && arg.find('.') < eq, where,
             ": expected --section.key=value");
  const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
  const Schema& s = schema();
  if (!s.is_string.count(key)) {
    const std::string section = key.substr(0, key.find('.'));
    SPMD_CHECK(s.keys.count(section), where, ": unknown section [", section,
               "] (sections: ", join(s.sections, ""), ")");
    SPMD_THROW(InvalidArgument, where, ": unknown key '", key, "' (", section, " has ",
               join(s.keys.at(section), ""), ")");
  }
  toml::table doc;
  try {
    const std::string line = "v = " + value;
    doc = toml::parse(std::string_view(line), std::string_view("override"));
  } catch (const toml::parse_error&) {
  }
  const bool parsed = doc.size() == 1 && doc.contains("v");
  if (!parsed || (s.is_string.at(key) && !doc["v"].is_string())) {
    doc = toml::table{{"v", value}};
  }
  docs_.push_back(std::move(doc));
  by_key_[key] = {docs_.back().get("v"), where};
}

// --- TOML text -------------------------------------------------------------------------

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The shortest text that reads back as the same double, always a TOML float.
std::string toml_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, d).ptr;
  std::string s(buf, end);
  const size_t e = s.find('e');
  if (e == std::string::npos) return s.find('.') == std::string::npos ? s + ".0" : s;
  const size_t digits = s[e + 1] == '-' || s[e + 1] == '+' ? e + 2 : e + 1;
  while (s.size() > digits + 1 && s[digits] == '0') s.erase(digits, 1);  // 1e-08 -> 1e-8
  return s;
}

// "string \"ten\"", "float 2.5", "a table": a value as an error message names it.
std::string describe(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string:
      return "string " + toml_string(*v.value<std::string>());
    case toml::node_type::integer:
      return "integer " + std::to_string(*v.value<int64_t>());
    case toml::node_type::floating_point:
      return "float " + toml_double(*v.value<double>());
    case toml::node_type::boolean:
      return *v.value<bool>() ? "boolean true" : "boolean false";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    default:
      return "a date or time";
  }
}

std::string join(const std::vector<std::string>& items, const char* quote) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + (quote + item + quote);
  return out;
}
}  // namespace spmd::train::config_detail

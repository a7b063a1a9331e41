// The option registry: the kinds of value an option takes, the table made from
// options.def, and parse_config over it.
//
// Not for: the declarations themselves (options.def) or what the options mean (the layers
// that read their Config members).
#include "startup/config.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <iterator>

#include "common/format.h"

extern char** environ;

namespace kolo::core {

Env process_env() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

const std::vector<OptionDoc>& launcher_variables() {
  static const std::vector<OptionDoc> kVars = {
      {"KOLO_RANK", "set by kolorun", "rank of the worker in [0, KOLO_SIZE)", ""},
      {"KOLO_SIZE", "set by kolorun", "number of workers", ""},
      {"KOLO_LOCAL_RANK", "set by kolorun", "rank among the workers on this host", ""},
      {"KOLO_LOCAL_SIZE", "set by kolorun", "workers on this host", ""},
      {"KOLO_CROSS_RANK", "set by kolorun",
       "rank among workers with the same local rank (host index)", ""},
      {"KOLO_CROSS_SIZE", "set by kolorun", "hosts with a worker of this local rank", ""},
      {"KOLO_RENDEZVOUS_ADDR", "set by kolorun",
       "host:port of the job's store (kolorun runs it; not with --mpi)", ""},
      {"KOLO_RENDEZVOUS_SECRET", "set by kolorun",
       "the job's secret for its store (32 hex digits; never on a command line)", ""},
      {"KOLO_HOST_ADDR", "set by kolorun",
       "the address of the worker's host as kolorun knows it (127.0.0.1 on one host)", ""},
      {kTerminalVar, "set by kolorun",
       "1: kolorun's output is a terminal (a line redrawn with \\r is shown in place), 0: it is "
       "not",
       ""},
  };
  return kVars;
}

bool output_is_terminal(const Env& env, int fd) {
  if (auto it = env.find(kTerminalVar); it != env.end()) {
    if (it->second == "1") return true;
    if (it->second == "0") return false;
  }
  return fd >= 0 && ::isatty(fd) == 1;
}

namespace {

Status bad(const std::string& name, const std::string& value, const std::string& want) {
  return InvalidArgument(name + "=" + value + " is not valid: expected " + want);
}

// "a, b or c".
std::string word_list(const std::vector<std::string>& words) {
  std::string s;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) s += i + 1 == words.size() ? " or " : ", ";
    s += words[i];
  }
  return s;
}

// The kinds of value an option takes (the `accepts` column of options.def). Each parses a
// non-empty text into a member, formats the member's default for the help, and says
// which values it accepts (in the help and in its error message).

// A decimal integer in [min, max]. strtoll skips leading blanks, as the variables were
// always read; a value past the range of long long saturates and is refused.
struct Integer {
  long long min, max;
  Integer(long long lo, long long hi) : min(lo), max(hi) {}
  template <typename T>
  Status parse(const char* name, const std::string& text, T* out) const {
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || v < min || v > max)
      return bad(name, text, accepts());
    *out = static_cast<T>(v);
    return Status::OK();
  }
  template <typename T>
  std::string format(T v) const {
    return std::to_string(v);
  }
  std::string accepts() const {
    return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  }
};

// A finite number in [min, max] (strtod also takes "inf" and "nan": both refused).
struct Number {
  double min, max;
  Number(double lo, double hi) : min(lo), max(hi) {}
  Status parse(const char* name, const std::string& text, double* out) const {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || !(v >= min) || !(v <= max)) {
      return bad(name, text, accepts());
    }
    *out = v;
    return Status::OK();
  }
  std::string format(double v) const { return number_string(v); }
  std::string accepts() const {
    return "a number in [" + number_string(min) + ", " + number_string(max) + "]";
  }
};

struct Flag {
  Status parse(const char* name, const std::string& text, bool* out) const {
    if (text != "0" && text != "1") return bad(name, text, accepts());
    *out = text == "1";
    return Status::OK();
  }
  std::string format(bool v) const { return v ? "1" : "0"; }
  std::string accepts() const { return "0 or 1"; }
};

// One of a few words, compared exactly (case and blanks matter).
struct OneOf {
  std::vector<std::string> words;
  OneOf(std::initializer_list<const char*> list) : words(list.begin(), list.end()) {}
  Status parse(const char* name, const std::string& text, std::string* out) const {
    if (std::find(words.begin(), words.end(), text) == words.end()) {
      return bad(name, text, accepts());
    }
    *out = text;
    return Status::OK();
  }
  std::string format(const std::string& v) const { return v; }
  std::string accepts() const { return word_list(words); }
};

// log::parse_level's names (and "warn", and the numbers 0 to 5).
struct LogLevel {
  static constexpr const char* kNames[] = {"trace", "debug", "info", "warning", "error", "off"};
  Status parse(const char* name, const std::string& text, log::Level* out) const {
    if (!log::parse_level(text, out)) return bad(name, text, accepts());
    return Status::OK();
  }
  std::string format(log::Level v) const { return kNames[v]; }
  std::string accepts() const {
    return word_list(std::vector<std::string>(std::begin(kNames), std::end(kNames)));
  }
};

struct Text {
  Status parse(const char*, const std::string& text, std::string* out) const {
    *out = text;
    return Status::OK();
  }
  std::string format(const std::string& v) const { return v; }
  std::string accepts() const { return ""; }
};

// A secret (the job's rendezvous secret): any text, like Text, but the help never shows a
// value (not even a default), and a parse cannot fail, so no error message repeats it.
struct Secret {
  Status parse(const char*, const std::string& text, std::string* out) const {
    *out = text;
    return Status::OK();
  }
  std::string format(const std::string&) const { return ""; }
  std::string accepts() const { return ""; }
};

// One line of options.def, ready to use: its help row (whose strings it owns) and its parse.
struct Option {
  const char* name;
  const char* doc;
  std::string default_value;
  std::string accepts;
  std::function<Status(const std::string& text, Config* out)> parse;
};

template <typename T, typename Kind>
Option make_option(const char* name, const char* doc, Kind kind, T Config::*member) {
  return Option{name, doc, kind.format(Config{}.*member), kind.accepts(),
                [name, kind, member](const std::string& text, Config* out) {
                  return kind.parse(name, text, &(out->*member));
                }};
}

const std::vector<Option>& options() {
  static const std::vector<Option> kOptions = {
#define KOLO_OPTION(type, member, name, default_value, accepts, doc) \
  make_option<type>(name, doc, accepts, &Config::member),
#include "startup/options.def"
#undef KOLO_OPTION
  };
  return kOptions;
}

}  // namespace

const std::vector<OptionDoc>& config_options() {
  static const std::vector<OptionDoc> kDocs = [] {
    std::vector<OptionDoc> docs;
    for (const Option& o : options()) {
      docs.push_back({o.name, o.default_value.c_str(), o.doc, o.accepts.c_str()});
    }
    return docs;
  }();
  return kDocs;
}

Status parse_config(const Env& env, Config* out) {
  Config c;
  for (const Option& o : options()) {
    auto it = env.find(o.name);
    if (it == env.end() || it->second.empty()) continue;  // the default
    KOLO_RETURN_IF_ERROR(o.parse(it->second, &c));
  }
  *out = c;
  return Status::OK();
}

}  // namespace kolo::core

// Python-compatible number text and str.format templates for the built-in callbacks, the
// "auto" mode rule and chief-only printing (callback_util.h).
//
// Not for: the callbacks' decisions (callbacks.cc, checkpoint_callbacks.cc).
#include "train/keras/callback_util.h"

#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <iostream>
#include <string_view>

#include "kolo/error.h"

namespace kolo::train::internal {
namespace {

[[noreturn]] void bad_template(const char* who, const std::string& tmpl, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument,
              std::string(who) + ": cannot format the filepath \"" + tmpl + "\": " + why);
}

// A parsed Python format spec.
struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', '=' or 0 (numbers: right)
  char sign = '-';
  bool alternate = false;
  int width = 0;
  int precision = -1;
  char type = 0;
};

bool parse_spec(std::string_view s, Spec* out) {
  Spec spec;
  std::size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    spec.fill = s[0];
    spec.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    if (spec.align == 0) {
      spec.fill = '0';
      spec.align = '=';
    }
    ++i;
  }
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') spec.width = spec.width * 10 + (s[i++] - '0');
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return false;
    spec.precision = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9')
      spec.precision = spec.precision * 10 + (s[i++] - '0');
  }
  if (i < s.size()) {
    const std::string_view types = "dfFeEgG%";
    if (types.find(s[i]) == std::string_view::npos) return false;
    spec.type = s[i++];
  }
  if (i != s.size()) return false;
  *out = spec;
  return true;
}

// Python's format(value, spec) for an int or a float.
std::string format_field(const char* who, const std::string& tmpl, const TemplateField& field,
                         std::string_view spec_text) {
  Spec spec;
  if (!parse_spec(spec_text, &spec)) {
    bad_template(who, tmpl,
                 "the format spec \"" + std::string(spec_text) + "\" of field \"" + field.name +
                     "\" is not supported (use [[fill]align][sign][#][0][width][.precision]"
                     "[type], type one of d f F e E g G %)");
  }
  if (spec.type == 'd' && !field.is_int) {
    bad_template(who, tmpl,
                 "field \"" + field.name + "\" is a float (" + py_float(field.value) +
                     "); format code 'd' needs an int: use e.g. {" + field.name + ":.2f}");
  }
  std::string body;  // the digits, without sign
  const double v = field.value;
  const bool negative = std::signbit(v) && !std::isnan(v);
  const double magnitude = std::fabs(v);
  std::string flags = spec.alternate ? "#" : "";
  if (field.is_int && (spec.type == 0 || spec.type == 'd')) {
    if (spec.precision >= 0) {
      bad_template(who, tmpl, "field \"" + field.name + "\" is an int: it takes no precision");
    }
    body = strprintf("%lld", static_cast<long long>(magnitude));
  } else if (spec.type == 0 && spec.precision < 0) {
    body = py_float(magnitude);
  } else if (spec.type == '%') {
    body = strprintf(("%" + flags + ".*f").c_str(), spec.precision < 0 ? 6 : spec.precision,
                     magnitude * 100) +
           "%";
  } else {
    const char type = spec.type == 0 ? 'g' : spec.type;
    const int precision = spec.precision < 0 ? 6 : spec.precision;
    body = strprintf(("%" + flags + ".*" + std::string(1, type)).c_str(), precision, magnitude);
  }
  std::string sign;
  if (negative) {
    sign = "-";
  } else if (spec.sign == '+') {
    sign = "+";
  } else if (spec.sign == ' ') {
    sign = " ";
  }
  const int pad = spec.width - static_cast<int>(sign.size() + body.size());
  if (pad <= 0) return sign + body;
  const std::string fill(pad, spec.fill);
  switch (spec.align == 0 ? '>' : spec.align) {
    case '<':
      return sign + body + fill;
    case '^':
      return std::string(pad / 2, spec.fill) + sign + body + std::string(pad - pad / 2, spec.fill);
    case '=':
      return sign + fill + body;
    default:
      return fill + sign + body;
  }
}

}  // namespace

bool monitor_greater(const char* who, const std::string& mode, const std::string& monitor) {
  if (mode == "max") return true;
  if (mode == "min") return false;
  if (mode != "auto") {
    throw Error(ErrorCode::kInvalidArgument, std::string(who) + ": mode \"" + mode +
                                                 "\" is not one of \"auto\", \"min\", \"max\"");
  }
  return monitor.find("acc") != std::string::npos || monitor.find("auc") != std::string::npos ||
         monitor.rfind("fmeasure", 0) == 0;
}

std::string py_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // The shortest round-trip digits in scientific form ("-1.2345e-05"), laid out as
  // Python's repr: positional for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, result.ptr - buf);
  std::string out;
  if (sci.front() == '-') {
    out = "-";
    sci.remove_prefix(1);
  }
  const std::size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::stoi(std::string(sci.substr(e + 1)));
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return out + strprintf("e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
}

std::string format_template(const char* who, const std::string& tmpl,
                            const std::vector<TemplateField>& fields) {
  std::string out;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if (c == '}') {
      if (i + 1 < tmpl.size() && tmpl[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      bad_template(who, tmpl, "a single '}' (write \"}}\" for a literal brace)");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const std::size_t close = tmpl.find('}', i);
    if (close == std::string::npos) bad_template(who, tmpl, "a '{' without its '}'");
    const std::string inside = tmpl.substr(i + 1, close - i - 1);
    const std::size_t colon = inside.find(':');
    const std::string name = inside.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : inside.substr(colon + 1);
    const TemplateField* field = nullptr;
    for (const auto& f : fields) {
      if (f.name == name) {
        field = &f;
        break;
      }
    }
    if (field == nullptr) {
      std::string known;
      for (const auto& f : fields) known += (known.empty() ? "" : ", ") + f.name;
      bad_template(who, tmpl, "no value named \"" + name + "\" (known now: " + known + ")");
    }
    out += format_field(who, tmpl, *field, spec);
    i = close;
  }
  return out;
}

std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(n > 0 ? n : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

void chief_print(const TrainingHost& host, const std::string& text) {
  if (!host.is_chief()) return;
  std::cout << text << '\n' << std::flush;
}

std::string log_names(const Logs& logs) {
  std::string out;
  for (const auto& [name, value] : logs) out += (out.empty() ? "" : ",") + name;
  return out;
}

}  // namespace kolo::train::internal

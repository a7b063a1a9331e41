// The wording and arithmetic every Store shares (store.h).
#include "rendezvous/store.h"

#include <charconv>
#include <chrono>
#include <cmath>

#include "common/format.h"

namespace kolo::rendezvous {

namespace {

// At most this many keys are listed in a message; the rest are counted.
constexpr std::size_t kKeysShown = 8;
// Values in messages are cut to this many bytes.
constexpr std::size_t kValueShown = 32;

std::string seconds_text(Clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  // Milliseconds are the finest a user cares about here.
  return number_string(std::round(s * 1000) / 1000) + " s";
}

}  // namespace

Status check_key(const std::string& store, const std::string& key) {
  if (key.empty())
    return InvalidArgument("rendezvous: " + store + ": the empty key is not allowed");
  return Status::OK();
}

std::string quote_key(const std::string& key) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (const char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || c == '\'' || c == '\\') {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

Status missing_keys_error(const std::string& store, const std::vector<std::string>& missing,
                          std::size_t waited_for, Clock::duration waited) {
  std::string keys;
  for (std::size_t i = 0; i < missing.size() && i < kKeysShown; ++i) {
    if (i > 0) keys += ", ";
    keys += quote_key(missing[i]);
  }
  if (missing.size() > kKeysShown) keys += ", ...";
  const bool one = missing.size() == 1;
  std::string m = "rendezvous: " + std::string(one ? "key " : "keys ") + keys;
  if (missing.size() < waited_for) {
    m += " (" + std::to_string(missing.size()) + " of the " + std::to_string(waited_for) +
         " keys waited for)";
  }
  m += one ? " was" : " were";
  m += " not set within " + seconds_text(waited) + " in " + store +
       "; is every process of the job running, and do they all use this store?";
  return PeerFailure(std::move(m));
}

Status add_to_counter(const std::string& store, const std::string& key, const std::string* current,
                      std::int64_t delta, std::int64_t* out) {
  std::int64_t value = 0;
  if (current != nullptr) {
    const char* begin = current->data();
    const char* end = begin + current->size();
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    if (current->empty() || ec != std::errc() || ptr != end) {
      std::string shown = current->substr(0, kValueShown);
      if (current->size() > kValueShown) shown += "...";
      return InvalidArgument("rendezvous: add on key " + quote_key(key) + " in " + store +
                             ": it holds " + quote_key(shown) +
                             ", not a decimal integer; add works only on keys that only add "
                             "writes (counters)");
    }
  }
  if (__builtin_add_overflow(value, delta, out)) {
    return InvalidArgument("rendezvous: add on key " + quote_key(key) + " in " + store + ": " +
                           std::to_string(value) + " + " + std::to_string(delta) +
                           " overflows a 64-bit integer");
  }
  return Status::OK();
}

}  // namespace kolo::rendezvous

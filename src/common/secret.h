// Comparing a presented secret with the job's (the TCP store's hello, the parameter-server
// rpc's PLAIN password). Not for: making secrets (kolorun) or keeping them out of logs.
#pragma once

#include <cstddef>
#include <string>

namespace kolo {

// Equal without an early exit, so the time taken says nothing about which byte differs.
// (The length is not secret: kolorun's secrets all have one length.)
inline bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace kolo

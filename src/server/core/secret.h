// Comparing a secret the client sent (a token, a restricted-API header value) with the
// server's: constant time in the secret's length, so it cannot be guessed byte by byte from
// timing. Shared by both front ends.
#pragma once

#include <string_view>

namespace sampan::server {

inline bool SecretEquals(std::string_view given, std::string_view secret) {
  unsigned diff = given.size() == secret.size() ? 0u : 1u;
  for (size_t i = 0; i < secret.size(); ++i)
    diff |= static_cast<unsigned>(static_cast<unsigned char>(i < given.size() ? given[i] : '\0') ^
                                  static_cast<unsigned char>(secret[i]));
  return diff == 0;
}

}  // namespace sampan::server

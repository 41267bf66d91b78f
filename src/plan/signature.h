// Signed plans: an Ed25519 signature (OpenSSL) over the whole plan file, so a node that serves
// plans built elsewhere can refuse one that was changed on the way or built by someone else.
// The plan's checksum finds damage; only a signature finds a plan that was rebuilt or edited
// and given a fresh checksum.
//
// A signed plan is the plan file followed by a trailer of kTrailerSize bytes:
//   magic "SPLNSIG1" (8) | Ed25519 public key (32) | signature (64) | reserved, zero (8)
// The signature covers every byte before the trailer (the unsigned plan exactly), and the file
// must end right after it. Readers that do not check signatures ignore the trailer (the plan's
// header says where its bytes end), so a signed plan runs everywhere a plan does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace sampan::plan {

inline constexpr char kSignatureMagic[8] = {'S', 'P', 'L', 'N', 'S', 'I', 'G', '1'};
inline constexpr size_t kTrailerSize = 8 + 32 + 64 + 8;

//! An Ed25519 public key a verifier trusts, with the file it came from (for messages).
struct TrustedKey {
  std::array<uint8_t, 32> key{};
  std::string source;
};

//! A key's short name in messages: the first 8 bytes of SHA-256 of the raw key, in hex.
std::string KeyFingerprint(const std::array<uint8_t, 32>& key);

//! `plan_bytes` (an unsigned plan) followed by the trailer signed with the Ed25519 private key
//! in PEM file `private_key_pem`. Errors name the key file (unreadable, not an Ed25519 private
//! key) or say the bytes are no plan or are signed already.
Result<std::string> SignPlan(const std::string& plan_bytes, const std::string& private_key_pem);

//! Ok when `private_key_pem` holds an Ed25519 private key (checked before a long build).
Status CheckSigningKey(const std::string& private_key_pem);

//! Reads Ed25519 public keys (PEM; a private key file is taken for its public half) from each file.
Result<std::vector<TrustedKey>> LoadTrustedKeys(const std::vector<std::string>& pem_files);

//! Ok when `bytes` (the plan file `what`) carries a valid signature by one of `trusted`; else an
//! error naming `what` and the reason: not signed, signed by an untrusted key (its fingerprint),
//! or a signature that does not match the contents (changed after signing).
Status VerifyPlanSignature(const std::string& bytes, const std::vector<TrustedKey>& trusted, const std::string& what);
//! The same for a file on disk.
Status VerifyPlanFile(const std::string& path, const std::vector<TrustedKey>& trusted);

}  // namespace sampan::plan

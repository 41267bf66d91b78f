#include "plan/signature.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "plan/plan.h"

namespace sampan::plan {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

Result<std::string> ReadWhole(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot read ", what, " '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (!f && !f.eof()) return IoError("reading ", what, " '", path, "' failed");
  return ss.str();
}

// Where the plan's own bytes end (its header's blob end), or an error when `bytes` is no plan.
Result<uint64_t> PlanEnd(const std::string& bytes, const std::string& what) {
  if (bytes.size() < sizeof(PlanHeader) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return InvalidArgument(what, ": not a Sampan plan (bad magic)");
  PlanHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  const uint64_t end = h.blob_offset + h.blob_size;
  if (end < h.blob_offset || end > bytes.size())
    return InvalidArgument(what, ": plan is truncated (header describes ", end, " bytes, file has ", bytes.size(), ")");
  return end;
}

// The Ed25519 key in PEM text (`want_private`: a private key; else a public key, or a private
// key taken for its public half).
Result<Pkey> ReadKey(const std::string& path, bool want_private) {
  SP_ASSIGN_OR_RETURN(std::string pem, ReadWhole(path, want_private ? "signing key" : "trusted key"));
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return Internal("OpenSSL: ", OpenSslError());
  Pkey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key && !want_private) {
    ERR_clear_error();
    std::unique_ptr<BIO, BioFree> bio2(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    key.reset(PEM_read_bio_PUBKEY(bio2.get(), nullptr, nullptr, nullptr));
  }
  if (!key)
    return InvalidArgument("'", path, "' holds no ", want_private ? "private" : "public or private",
                           " key in PEM form (", OpenSslError(),
                           "); make one with `openssl genpkey -algorithm ed25519`");
  ERR_clear_error();
  if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519)
    return InvalidArgument("'", path, "' holds a ", OBJ_nid2sn(EVP_PKEY_get_id(key.get())),
                           " key; plans are signed with Ed25519 keys (`openssl genpkey -algorithm ed25519`)");
  return key;
}

Result<std::array<uint8_t, 32>> RawPublic(EVP_PKEY* key) {
  std::array<uint8_t, 32> raw{};
  size_t len = raw.size();
  if (EVP_PKEY_get_raw_public_key(key, raw.data(), &len) != 1 || len != raw.size())
    return Internal("OpenSSL: cannot read the Ed25519 public key (", OpenSslError(), ")");
  return raw;
}

}  // namespace

std::string KeyFingerprint(const std::array<uint8_t, 32>& key) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(key.data(), key.size(), md, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < 8 && i < n; ++i) {
    s += hex[md[i] >> 4];
    s += hex[md[i] & 15];
  }
  return s;
}

Result<std::string> SignPlan(const std::string& plan_bytes, const std::string& private_key_pem) {
  SP_ASSIGN_OR_RETURN(uint64_t end, PlanEnd(plan_bytes, "the plan to sign"));
  if (end != plan_bytes.size())
    return InvalidArgument("the plan to sign has ", plan_bytes.size() - end,
                           " bytes after its end (signed already?): sign an unsigned plan");
  SP_ASSIGN_OR_RETURN(Pkey key, ReadKey(private_key_pem, true));
  SP_ASSIGN_OR_RETURN(auto pub, RawPublic(key.get()));
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  uint8_t sig[64];
  size_t sig_len = sizeof(sig);
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &sig_len, reinterpret_cast<const unsigned char*>(plan_bytes.data()),
                     plan_bytes.size()) != 1 ||
      sig_len != sizeof(sig))
    return Internal("OpenSSL: signing failed (", OpenSslError(), ")");
  std::string out = plan_bytes;
  out.append(kSignatureMagic, sizeof(kSignatureMagic));
  out.append(reinterpret_cast<const char*>(pub.data()), pub.size());
  out.append(reinterpret_cast<const char*>(sig), sizeof(sig));
  out.append(8, '\0');
  return out;
}

Status CheckSigningKey(const std::string& private_key_pem) {
  return ReadKey(private_key_pem, true).status();
}

Result<std::vector<TrustedKey>> LoadTrustedKeys(const std::vector<std::string>& pem_files) {
  std::vector<TrustedKey> keys;
  for (const std::string& f : pem_files) {
    SP_ASSIGN_OR_RETURN(Pkey key, ReadKey(f, false));
    SP_ASSIGN_OR_RETURN(auto raw, RawPublic(key.get()));
    keys.push_back(TrustedKey{raw, f});
  }
  return keys;
}

Status VerifyPlanSignature(const std::string& bytes, const std::vector<TrustedKey>& trusted, const std::string& what) {
  SP_ASSIGN_OR_RETURN(uint64_t end, PlanEnd(bytes, what));
  if (end == bytes.size())
    return InvalidArgument(what,
                           ": the plan is not signed, and only signed plans are trusted (--plan-trust); sign "
                           "it with `sampan build --sign KEY`");
  if (bytes.size() - end != kTrailerSize || std::memcmp(bytes.data() + end, kSignatureMagic, 8) != 0)
    return InvalidArgument(what, ": signature check failed: ", bytes.size() - end,
                           " bytes follow the plan and they are not a signature trailer");
  const char* t = bytes.data() + end;
  std::array<uint8_t, 32> pub{};
  std::memcpy(pub.data(), t + 8, 32);
  const TrustedKey* match = nullptr;
  for (const TrustedKey& k : trusted)
    if (k.key == pub) match = &k;
  if (match == nullptr)
    return InvalidArgument(what, ": signed by key ", KeyFingerprint(pub), ", which is not trusted (--plan-trust ",
                           trusted.size(), " key(s))");
  Pkey key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, pub.data(), pub.size()));
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  if (!key || !ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1)
    return Internal("OpenSSL: ", OpenSslError());
  const int ok = EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(t + 40), 64,
                                  reinterpret_cast<const unsigned char*>(bytes.data()), end);
  ERR_clear_error();
  if (ok != 1)
    return InvalidArgument(what, ": signature check failed: the plan's bytes are not what key ", KeyFingerprint(pub),
                           " (", match->source, ") signed (changed after signing)");
  return Status::Ok();
}

Status VerifyPlanFile(const std::string& path, const std::vector<TrustedKey>& trusted) {
  SP_ASSIGN_OR_RETURN(std::string bytes, ReadWhole(path, "plan"));
  return VerifyPlanSignature(bytes, trusted, path);
}

}  // namespace sampan::plan

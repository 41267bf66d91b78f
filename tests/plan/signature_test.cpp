// Signed plans (plan/signature.h): a signed plan verifies with its key and still reads and runs as
// a plan; one flipped bit anywhere in it (header, metadata, weights, the trailer's key or
// signature) fails the check; another key, an unsigned plan, a damaged trailer and a plan signed
// twice are refused with the reason; keys of another algorithm are refused by name.
#include "plan/signature.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "plan/plan.h"

namespace sampan::plan {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("sampan_sig_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A fresh key of `type` ("ED25519", "RSA") as a PEM private key file; *pub_path gets its public half.
std::string MakeKey(const char* type, const std::string& name, std::string* pub_path = nullptr) {
  EVP_PKEY* k = std::string(type) == "RSA" ? EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048))
                                           : EVP_PKEY_Q_keygen(nullptr, nullptr, type);
  EXPECT_NE(k, nullptr);
  const std::string path = TempPath(name + ".pem");
  FILE* f = std::fopen(path.c_str(), "w");
  PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  if (pub_path) {
    *pub_path = TempPath(name + ".pub.pem");
    FILE* p = std::fopen(pub_path->c_str(), "w");
    PEM_write_PUBKEY(p, k);
    std::fclose(p);
  }
  EVP_PKEY_free(k);
  return path;
}

std::string PlanBytes() {
  auto p = builder::Build(passes::testing::MustParse(R"(
    opset 17
    graph g (x: f32[2,8]) -> (y) {
      w = const f32[8,4] random
      y = MatMul(x, w)
    })"),
                          builder::BuildConfig{}, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  auto bytes = SerializePlan(*p);
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

TEST(PlanSignature, SignedPlanVerifiesAndStillReads) {
  std::string pub;
  const std::string key = MakeKey("ED25519", "a", &pub);
  const std::string plan = PlanBytes();
  auto signed_bytes = SignPlan(plan, key);
  ASSERT_TRUE(signed_bytes.ok()) << signed_bytes.status().ToString();
  ASSERT_EQ(signed_bytes->size(), plan.size() + kTrailerSize);
  EXPECT_EQ(signed_bytes->compare(0, plan.size(), plan), 0);  // the plan itself is unchanged
  auto trusted = LoadTrustedKeys({pub});
  ASSERT_TRUE(trusted.ok()) << trusted.status().ToString();
  EXPECT_TRUE(VerifyPlanSignature(*signed_bytes, *trusted, "p.plan").ok());
  // A private key file is trusted for its public half too.
  auto from_private = LoadTrustedKeys({key});
  ASSERT_TRUE(from_private.ok());
  EXPECT_EQ((*from_private)[0].key, (*trusted)[0].key);
  // Readers that do not check signatures read it as the plan.
  const std::string path = TempPath("signed.plan");
  ASSERT_TRUE(WritePlanBytes(*signed_bytes, path).ok());
  auto read = ReadPlan(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(VerifyPlanFile(path, *trusted).ok());
  std::filesystem::remove(path);
}

TEST(PlanSignature, AnyFlippedBitIsCaught) {
  std::string pub;
  const std::string key = MakeKey("ED25519", "b", &pub);
  auto signed_bytes = SignPlan(PlanBytes(), key);
  ASSERT_TRUE(signed_bytes.ok());
  auto trusted = LoadTrustedKeys({pub});
  ASSERT_TRUE(trusted.ok());
  const size_t n = signed_bytes->size(), plan_end = n - kTrailerSize;
  // Header, metadata, weights, and in the trailer the key and the signature.
  for (size_t at : {size_t{20}, size_t{70}, plan_end / 2, plan_end - 1, plan_end + 8 + 5, plan_end + 40 + 9}) {
    std::string bad = *signed_bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    Status st = VerifyPlanSignature(bad, *trusted, "p.plan");
    EXPECT_FALSE(st.ok()) << "flipped byte " << at;
    EXPECT_NE(st.message().find("p.plan"), std::string::npos) << st.ToString();
  }
}

TEST(PlanSignature, RefusalsSayWhy) {
  std::string pub_a, pub_b;
  const std::string key_a = MakeKey("ED25519", "c", &pub_a);
  const std::string key_b = MakeKey("ED25519", "d", &pub_b);
  const std::string plan = PlanBytes();
  auto trusted = LoadTrustedKeys({pub_a});
  ASSERT_TRUE(trusted.ok());
  auto by_b = SignPlan(plan, key_b);
  ASSERT_TRUE(by_b.ok());
  Status st = VerifyPlanSignature(*by_b, *trusted, "b.plan");
  EXPECT_NE(st.message().find("not trusted"), std::string::npos) << st.ToString();
  auto keys_b = LoadTrustedKeys({pub_b});
  EXPECT_NE(st.message().find(KeyFingerprint((*keys_b)[0].key)), std::string::npos) << st.ToString();
  st = VerifyPlanSignature(plan, *trusted, "u.plan");
  EXPECT_NE(st.message().find("not signed"), std::string::npos) << st.ToString();
  // A cut trailer, and bytes that are no trailer.
  auto by_a = SignPlan(plan, key_a);
  ASSERT_TRUE(by_a.ok());
  st = VerifyPlanSignature(by_a->substr(0, by_a->size() - 1), *trusted, "t.plan");
  EXPECT_NE(st.message().find("not a signature trailer"), std::string::npos) << st.ToString();
  st = VerifyPlanSignature(plan + std::string(kTrailerSize, 'x'), *trusted, "x.plan");
  EXPECT_FALSE(st.ok());
  // ReadPlan: a signature trailer is fine, other trailing bytes are damage.
  auto parsed = ParsePlan(std::make_shared<const std::string>(plan + std::string(kTrailerSize, 'x')), "x.plan");
  EXPECT_FALSE(parsed.ok());
  // Signing twice, signing garbage.
  EXPECT_FALSE(SignPlan(*by_a, key_a).ok());
  EXPECT_FALSE(SignPlan("not a plan", key_a).ok());
}

TEST(PlanSignature, KeysOfOtherKindsAreRefused) {
  const std::string rsa = MakeKey("RSA", "rsa");
  Status st = CheckSigningKey(rsa);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Ed25519"), std::string::npos) << st.ToString();
  EXPECT_FALSE(LoadTrustedKeys({rsa}).ok());
  EXPECT_FALSE(CheckSigningKey(TempPath("missing.pem")).ok());
  std::string pub;
  MakeKey("ED25519", "e", &pub);
  st = CheckSigningKey(pub);  // a public key cannot sign
  EXPECT_NE(st.message().find("no private key"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace sampan::plan

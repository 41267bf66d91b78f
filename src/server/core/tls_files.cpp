#include "server/core/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>

namespace sampan::server::tls {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no details";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

std::unique_ptr<BIO, BioFree> Bio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// "expired on <date>" / "is not valid before <date>" / "" when valid now.
std::string Validity(X509* x) {
  auto when = [](const ASN1_TIME* t) {
    std::unique_ptr<BIO, BioFree> out(BIO_new(BIO_s_mem()));
    ASN1_TIME_print(out.get(), t);
    char* data = nullptr;
    const long n = BIO_get_mem_data(out.get(), &data);
    return std::string(data, static_cast<size_t>(n));
  };
  if (X509_cmp_current_time(X509_get0_notAfter(x)) <= 0) return "expired on " + when(X509_get0_notAfter(x));
  if (X509_cmp_current_time(X509_get0_notBefore(x)) >= 0) return "is not valid before " + when(X509_get0_notBefore(x));
  return "";
}

}  // namespace

Result<std::string> ReadPem(const std::string& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(flag, ": cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string pem = ss.str();
  if (pem.find("-----BEGIN ") == std::string::npos) return InvalidArgument(flag, ": '", path, "' holds no PEM block");
  return pem;
}

Status CheckCertificates(const std::string& pem, const std::string& path) {
  auto bio = Bio(pem);
  int count = 0;
  while (true) {
    std::unique_ptr<X509, X509Free> x(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!x) break;
    ++count;
    if (std::string v = Validity(x.get()); !v.empty())
      return InvalidArgument("certificate ", count, " in '", path, "' ", v);
  }
  ERR_clear_error();  // the end of the file reads as an error
  if (count == 0) return InvalidArgument("'", path, "' holds no certificate");
  return Status::Ok();
}

Status CheckCertificateAndKey(const std::string& cert_pem, const std::string& cert_path, const std::string& key_pem,
                              const std::string& key_path) {
  auto cb = Bio(cert_pem);
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (!cert) return InvalidArgument("'", cert_path, "' holds no certificate (", OpenSslError(), ")");
  if (std::string v = Validity(cert.get()); !v.empty())
    return InvalidArgument("the server certificate '", cert_path, "' ", v);
  auto kb = Bio(key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!key) return InvalidArgument("'", key_path, "' holds no private key, or an encrypted one (", OpenSslError(), ")");
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("'", key_path, "' is not the private key of the certificate '", cert_path, "'");
  }
  return Status::Ok();
}

Result<ServerTlsPem> LoadServerTls(const ServerTlsFiles& f, std::string_view prefix) {
  const std::string p(prefix);
  if (f.server_cert.empty() || f.server_key.empty())
    return InvalidArgument(p, "-use-ssl needs ", p, "-server-cert and ", p, "-server-key (PEM files)");
  if (f.mutual && f.root_cert.empty())
    return InvalidArgument(p, "-use-ssl-mutual needs ", p, "-root-cert (the CA that signs client certificates)");
  if (!f.mutual && !f.root_cert.empty())
    return InvalidArgument(p, "-root-cert verifies client certificates, which only ", p, "-use-ssl-mutual asks for");
  ServerTlsPem pem;
  SP_ASSIGN_OR_RETURN(pem.cert_chain, ReadPem(f.server_cert, p + "-server-cert"));
  SP_ASSIGN_OR_RETURN(pem.key, ReadPem(f.server_key, p + "-server-key"));
  SP_RETURN_IF_ERROR(CheckCertificateAndKey(pem.cert_chain, f.server_cert, pem.key, f.server_key));
  if (f.mutual) {
    SP_ASSIGN_OR_RETURN(pem.root, ReadPem(f.root_cert, p + "-root-cert"));
    SP_RETURN_IF_ERROR(CheckCertificates(pem.root, f.root_cert));
  }
  return pem;
}

}  // namespace sampan::server::tls

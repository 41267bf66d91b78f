// TLS material for the front ends: PEM files read and checked up front (OpenSSL), so a wrong
// path, a key that is not the certificate's or an expired certificate is named at start-up.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace sampan::server::tls {

//! The file's bytes; errors name `flag` and the path, and refuse files that hold no PEM block.
Result<std::string> ReadPem(const std::string& path, std::string_view flag);
//! Every certificate in `pem` parses and is valid now (not expired, not yet to come).
Status CheckCertificates(const std::string& pem, const std::string& path);
//! The first certificate of `cert_pem` is valid now and `key_pem` is its private key.
Status CheckCertificateAndKey(const std::string& cert_pem, const std::string& cert_path, const std::string& key_pem,
                              const std::string& key_path);

//! A front end's TLS settings as its flags give them (`prefix` "--grpc" or "--http": the flags are
//! PREFIX-use-ssl, PREFIX-use-ssl-mutual, PREFIX-server-cert, PREFIX-server-key, PREFIX-root-cert).
struct ServerTlsFiles {
  bool mutual = false;
  std::string server_cert, server_key, root_cert;  //!< paths
};
//! The PEM material of `files`, every file read and checked (LoadServerTls's errors name the flag).
struct ServerTlsPem {
  std::string cert_chain, key, root;  //!< root: empty unless mutual
};
Result<ServerTlsPem> LoadServerTls(const ServerTlsFiles& files, std::string_view prefix);

}  // namespace sampan::server::tls

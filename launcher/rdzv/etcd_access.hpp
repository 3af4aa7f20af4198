#pragma once
// --rdzv-backend=etcd over https, with etcd's user authentication: the files --rdzv-conf names
// (cacert=, cert=, key=, password_file=) read and checked once, before anything starts, into the
// EtcdSecurity every etcd client of this rankrun shares.

#include <memory>
#include <string>

#include "launcher/config/options.hpp"
#include "rendezvous/etcd_client.hpp"

namespace rankrun::launcher::rdzv {

/// nullptr for plain http without a user. Throws LaunchError naming the file and the fix: a
/// file that cannot be read, a certificate or key that is not one, a password file that other
/// users may read.
std::shared_ptr<rendezvous::EtcdSecurity> make_etcd_security(const LaunchConfig& config);

/// The contents of a password file, without its line end: a regular file of at most 4 KiB that
/// only its owner may read or write. `flag` names it in messages ("--rdzv-conf password_file").
std::string read_password_file(const std::string& flag, const std::string& path);

}  // namespace rankrun::launcher::rdzv

#include "launcher/rdzv/etcd_access.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "launcher/types/launch_error.hpp"
#include "base/read_file.hpp"

namespace rankrun::launcher::rdzv {
namespace {

constexpr std::size_t k_max_password_file = 4096;

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

std::string read_password_file(const std::string& flag, const std::string& path) {
  const std::string named = flag + "=" + path;
  auto file = read_file(path, k_max_password_file, true);
  if (!file.ok()) throw LaunchError(named + ": cannot read it: " + std::strerror(file.error));
  if (!file.regular) throw LaunchError(named + ": not a regular file");
  // As ssh with a private key: a secret other users may read is no secret.
  if ((file.mode & 077) != 0) {
    throw LaunchError(named + ": other users may " + ((file.mode & 044) != 0 ? "read" : "change") + " it (mode " +
                      mode_text(file.mode) + "); make it yours alone: chmod 600 " + path);
  }
  if (file.truncated) throw LaunchError(named + ": over 4 KiB; it should hold the password alone");
  auto& text = file.text;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty()) throw LaunchError(named + ": the file is empty; write the user's password in it");
  if (text.find('\n') != std::string::npos)
    throw LaunchError(named + ": holds more than one line; write the password alone");
  return text;
}

std::shared_ptr<rendezvous::EtcdSecurity> make_etcd_security(const LaunchConfig& c) {
  const auto& etcd = c.etcd_settings;
  if (c.rdzv != RdzvKind::Etcd || (!etcd.https && etcd.user.empty())) return nullptr;
  rendezvous::EtcdAccess access;
  access.https = etcd.https;
  access.cacert = etcd.cacert;
  access.cert = etcd.cert;
  access.key = etcd.key;
  access.user = etcd.user;
  if (!etcd.user.empty()) {
    access.password = read_password_file("--rdzv-conf password_file", etcd.password_file);
    access.password_origin = "password_file=" + etcd.password_file;
  }
  try {
    return std::make_shared<rendezvous::EtcdSecurity>(std::move(access));
  } catch (const rendezvous::StoreError& e) {
    throw LaunchError(std::string("--rdzv-conf ") + e.what());
  }
}

}  // namespace rankrun::launcher::rdzv

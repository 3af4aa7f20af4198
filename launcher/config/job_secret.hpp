#pragma once
// The job secret's pure side: where a node's secret comes from, what makes its file unfit, what
// a secret file's contents mean, and what a node without one says. The secret itself is proven
// in the store's key-space handshake (rendezvous/key_space_auth.hpp); the file is read in
// launcher/host/job_secret_file.cpp.
//
// Sources, first found wins:
//   1. --rdzv-conf secret_file=PATH
//   2. RANKRUN_JOB_SECRET_FILE=PATH
//   3. systemd's credential rankrun-job-secret ($CREDENTIALS_DIRECTORY/rankrun-job-secret, from
//      LoadCredential= or SetCredential= in the unit), when the service has it
//   4. inside a Slurm job, MUNGE: the store host makes a secret and hands it to each node in a
//      MUNGE credential (see launcher/host/munge.hpp)

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "launcher/types/env_map.hpp"

namespace rankrun::launcher {

inline constexpr const char* k_secret_file_env = "RANKRUN_JOB_SECRET_FILE";
/// systemd's credential name, in $CREDENTIALS_DIRECTORY.
inline constexpr const char* k_secret_credential = "rankrun-job-secret";
/// A secret file is at most this many bytes.
inline constexpr std::size_t k_max_secret_file_bytes = 4096;

struct SecretSource {
  std::string path;
  /// Where the path came from, for messages: "--rdzv-conf secret_file=PATH".
  std::string origin;
  /// The file need not exist (systemd's credential directory without the credential).
  bool optional = false;
};

/// The source of this node's secret file (sources 1-3 above); nullopt: none of them.
/// `conf_secret_file`: --rdzv-conf secret_file= (empty: not given).
std::optional<SecretSource> choose_secret_source(const std::string& conf_secret_file, const EnvMap& env);

/// What rankrun saw of the opened file.
struct SecretFileFacts {
  bool regular = true;
  unsigned mode = 0600;  // permission bits
  unsigned long long size = 0;
};

/// Why the file cannot hold the job secret (readable or writable by others than its owner,
/// not a regular file, empty, larger than k_max_secret_file_bytes), naming the file, its
/// origin and the fix; nullopt when it can.
std::optional<std::string> secret_file_problem(const SecretSource& source, const SecretFileFacts& facts);

/// The secret in a file's contents: the bytes without the line ends at the end (so that
/// `echo S > FILE` and `printf S > FILE` agree); empty when nothing else is there.
std::string secret_from_contents(std::string contents);

/// The payload of the MUNGE credential that carries a job's secret: it names the run
/// ("<job>.<step>" under Slurm), so that a credential made for another job of the same user is
/// not taken.
std::string munge_secret_payload(std::string_view run_id, std::string_view secret);
/// The secret in a decoded payload made for `run_id`; nullopt with `why` set otherwise.
std::optional<std::string> secret_from_munge_payload(std::string_view payload, std::string_view run_id,
                                                     std::string& why);
/// The munged socket Slurm uses, from `scontrol show config`'s "AuthInfo = ...,socket=PATH,...";
/// nullopt when it names none (munge's default socket then).
std::optional<std::string> munge_socket_in_slurm_config(std::string_view scontrol_show_config);

/// The warning every node of a multi-node job without a secret prints once: what an outsider
/// who reaches `store_endpoint` ("10.0.0.1:29500") could do, and how to set a secret.
std::string no_secret_warning(const std::string& store_endpoint);

}  // namespace rankrun::launcher

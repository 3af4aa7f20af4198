// worker_runtime/nccl_search: where NcclCommunicator looks for NCCL and the CUDA runtime, in
// which order, and the words of its errors.

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "worker_runtime/nccl_search.hpp"

using rankrun::worker::cudart_spec;
using rankrun::worker::enclosing_site_packages;
using rankrun::worker::library_candidates;
using rankrun::worker::library_not_found_message;
using rankrun::worker::LibraryAttempt;
using rankrun::worker::LibraryCandidate;
using rankrun::worker::missing_symbols_message;
using rankrun::worker::nccl_spec;
using rankrun::worker::nccl_version_text;
using rankrun::worker::NcclSearchInputs;
using rankrun::worker::python_package_dirs;
using Kind = LibraryCandidate::Kind;

namespace {

// A machine's python3.X folders, by lib folder.
NcclSearchInputs inputs(std::map<std::string, std::vector<std::string>> pythons = {}) {
  NcclSearchInputs in;
  in.python_dirs = [pythons](const std::string& lib) {
    const auto it = pythons.find(lib);
    return it == pythons.end() ? std::vector<std::string>() : it->second;
  };
  return in;
}

std::vector<std::string> dirs_of(const NcclSearchInputs& in) {
  std::vector<std::string> out;
  for (const auto& d : python_package_dirs(in)) out.push_back(d.dir + " <- " + d.origin);
  return out;
}

// The candidates as one line each: "kind dir names...".
std::vector<std::string> lines_of(const std::vector<LibraryCandidate>& candidates) {
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    const char* kind = c.kind == Kind::override_file ? "override"
                       : c.kind == Kind::loaded      ? "loaded"
                       : c.kind == Kind::files       ? "files"
                                                     : "by_name";
    std::string line = std::string(kind) + (c.dir.empty() ? "" : " " + c.dir) + " (" + c.origin + "):";
    for (const auto& n : c.names) line += " " + n;
    out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE("the runtime's own site-packages is the nearest folder of that name above its file") {
  CHECK(enclosing_site_packages("/v/lib/python3.12/site-packages/rankrun/lib/librankrun_worker.so.0.1") ==
        "/v/lib/python3.12/site-packages");
  CHECK(enclosing_site_packages("/usr/local/lib/python3.11/dist-packages/rankrun/lib/librankrun_worker.so.0.1") ==
        "/usr/local/lib/python3.11/dist-packages");
  // The nearest one, lexically (".." taken away first).
  CHECK(enclosing_site_packages("/a/site-packages/b/site-packages/rankrun/lib/x.so") ==
        "/a/site-packages/b/site-packages");
  CHECK(enclosing_site_packages("/a/site-packages/b/../rankrun/lib/x.so") == "/a/site-packages");
  CHECK(enclosing_site_packages("site-packages/rankrun/lib/x.so") == "site-packages");
  CHECK(enclosing_site_packages("./a//site-packages/./rankrun/x.so") == "a/site-packages");
  CHECK(enclosing_site_packages("/../site-packages/rankrun/x.so") == "/site-packages");
  CHECK(enclosing_site_packages("../../site-packages/rankrun/x.so") == "../../site-packages");
  CHECK_FALSE(enclosing_site_packages("/usr/lib/x86_64-linux-gnu/librankrun_worker.so.0.1"));
  CHECK_FALSE(enclosing_site_packages("/opt/site-packages-old/lib/x.so"));
  CHECK_FALSE(enclosing_site_packages(""));
  CHECK_FALSE(enclosing_site_packages("librankrun_worker.so.0.1"));
}

TEST_CASE("site-packages in order: VIRTUAL_ENV, the runtime's own, PYTHONPATH, CONDA_PREFIX; each once") {
  auto in = inputs({{"/venv/lib", {"python3.11", "python3.12"}}, {"/conda/lib", {"python3.10"}}});
  in.virtual_env = "/venv/";
  in.runtime_file = "/home/u/w/site-packages/rankrun/lib/librankrun_worker.so.0.1";
  in.pythonpath = "/p1::/p2/:/venv/lib/python3.12/site-packages";
  in.conda_prefix = "/conda";
  CHECK(dirs_of(in) == std::vector<std::string>{
                           "/venv/lib/python3.11/site-packages <- VIRTUAL_ENV",
                           "/venv/lib/python3.12/site-packages <- VIRTUAL_ENV",
                           "/home/u/w/site-packages <- the site-packages of librankrun_worker",
                           "/p1 <- PYTHONPATH",
                           "/p2 <- PYTHONPATH",
                           "/conda/lib/python3.10/site-packages <- CONDA_PREFIX",
                       });

  // The wheel's runtime inside the activated venv: that folder once, as the venv's.
  in = inputs({{"/venv/lib", {"python3.12"}}});
  in.virtual_env = "/venv";
  in.runtime_file = "/venv/lib/python3.12/site-packages/rankrun/lib/librankrun_worker.so.0.1";
  CHECK(dirs_of(in) == std::vector<std::string>{"/venv/lib/python3.12/site-packages <- VIRTUAL_ENV"});

  // A venv whose lib folder shows no python3.X: the pattern, so that the error says where.
  in = inputs();
  in.virtual_env = "/gone";
  CHECK(dirs_of(in) == std::vector<std::string>{"/gone/lib/python3.*/site-packages <- VIRTUAL_ENV"});

  // Nothing Python about the process: nothing.
  CHECK(dirs_of(inputs()).empty());
}

TEST_CASE("NCCL: already loaded, then torch's wheel in each site-packages, conda's lib, then by soname") {
  auto in = inputs({{"/venv/lib", {"python3.12"}}});
  in.virtual_env = "/venv";
  in.pythonpath = "/extra";
  in.conda_prefix = "/conda";
  CHECK(lines_of(library_candidates(nccl_spec(), in)) ==
        std::vector<std::string>{
            "loaded (already loaded in this process): libnccl.so.2",
            "files /venv/lib/python3.12/site-packages (VIRTUAL_ENV): nvidia/nccl/lib/libnccl.so.2",
            "files /extra (PYTHONPATH): nvidia/nccl/lib/libnccl.so.2",
            "files /conda/lib/python3.*/site-packages (CONDA_PREFIX): nvidia/nccl/lib/libnccl.so.2",
            "files /conda (CONDA_PREFIX): lib/libnccl.so.2",
            "by_name (LD_LIBRARY_PATH, then the system's library path): libnccl.so.2",
        });
}

TEST_CASE("the CUDA runtime: versions 13, 12 and 11, from the cu13 and the cu12/cu11 wheels' folders") {
  auto in = inputs();
  in.pythonpath = "/sp";
  CHECK(lines_of(library_candidates(cudart_spec(), in)) ==
        std::vector<std::string>{
            "loaded (already loaded in this process): libcudart.so.13 libcudart.so.12 libcudart.so.11.0 libcudart.so",
            "files /sp (PYTHONPATH): nvidia/cu13/lib/libcudart.so.13 nvidia/cuda_runtime/lib/libcudart.so.12 "
            "nvidia/cuda_runtime/lib/libcudart.so.11.0",
            "by_name (LD_LIBRARY_PATH, then the system's library path): libcudart.so.13 libcudart.so.12 "
            "libcudart.so.11.0 libcudart.so",
        });
}

TEST_CASE("an override variable is the one place of its library, and leaves the other alone") {
  auto in = inputs();
  in.virtual_env = "/venv";
  in.overrides["RANKRUN_NCCL_LIBRARY"] = "/opt/nccl/lib/libnccl.so.2";
  CHECK(lines_of(library_candidates(nccl_spec(), in)) ==
        std::vector<std::string>{"override (RANKRUN_NCCL_LIBRARY): /opt/nccl/lib/libnccl.so.2"});
  CHECK(library_candidates(cudart_spec(), in).front().kind == Kind::loaded);
  in.overrides["RANKRUN_CUDART_LIBRARY"] = "/c/libcudart.so.12";
  CHECK(lines_of(library_candidates(cudart_spec(), in)) ==
        std::vector<std::string>{"override (RANKRUN_CUDART_LIBRARY): /c/libcudart.so.12"});
  in.overrides["RANKRUN_NCCL_LIBRARY"] = "";  // set but empty: not an override
  CHECK(library_candidates(nccl_spec(), in).front().kind == Kind::loaded);
}

TEST_CASE("not found: every place looked, in order, what was there, and the fix") {
  auto in = inputs({{"/venv/lib", {"python3.12"}}});
  in.virtual_env = "/venv";
  in.ld_library_path = "/a:/b";
  std::vector<LibraryAttempt> attempts;
  for (const auto& c : library_candidates(nccl_spec(), in)) attempts.push_back({c, ""});
  attempts[1].outcome = "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2: invalid ELF header";
  CHECK(library_not_found_message(nccl_spec(), attempts, in) ==
        "cannot load NCCL (libnccl.so.2) for rankrun::NcclCommunicator; looked, in order:\n"
        "    libnccl.so.2 already loaded in this process: no\n"
        "    /venv/lib/python3.12/site-packages (VIRTUAL_ENV): "
        "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2: invalid ELF header\n"
        "    libnccl.so.2 by name (LD_LIBRARY_PATH=/a:/b, then the system's library path): not found\n"
        "  fix: pip install nvidia-nccl-cu12 (CUDA 13: nvidia-nccl-cu13) in this venv, or set LD_LIBRARY_PATH to "
        "the folder of libnccl.so.2, or RANKRUN_NCCL_LIBRARY=/path/to/libnccl.so.2");
}

TEST_CASE("not found without any Python environment: says so, and where the runtime itself is") {
  auto in = inputs();
  in.runtime_file = "/usr/lib/librankrun_worker.so.0.1";
  std::vector<LibraryAttempt> attempts;
  for (const auto& c : library_candidates(cudart_spec(), in)) attempts.push_back({c, ""});
  const auto message = library_not_found_message(cudart_spec(), attempts, in);
  CHECK(message ==
        "cannot load the CUDA runtime (libcudart.so.13, libcudart.so.12, libcudart.so.11.0 or libcudart.so) for "
        "rankrun::NcclCommunicator; looked, in order:\n"
        "    libcudart.so.13, libcudart.so.12, libcudart.so.11.0 or libcudart.so already loaded in this process: no\n"
        "    no Python environment to look in: VIRTUAL_ENV, PYTHONPATH and CONDA_PREFIX are not set and "
        "librankrun_worker (/usr/lib/librankrun_worker.so.0.1) is in no site-packages\n"
        "    libcudart.so.13, libcudart.so.12, libcudart.so.11.0 or libcudart.so by name (LD_LIBRARY_PATH not set; "
        "the system's library path): not found\n"
        "  fix: pip install nvidia-cuda-runtime-cu12 (CUDA 13: nvidia-cuda-runtime) in this venv, or set "
        "LD_LIBRARY_PATH to the folder of libcudart.so.N (e.g. /usr/local/cuda/lib64), or "
        "RANKRUN_CUDART_LIBRARY=/path/to/libcudart.so.N");

  // An override that fails names the variable, its value and why; no word of other places.
  in.overrides["RANKRUN_NCCL_LIBRARY"] = "/nope/libnccl.so.2";
  attempts = {{library_candidates(nccl_spec(), in).front(), ""}};
  CHECK(library_not_found_message(nccl_spec(), attempts, in) ==
        "cannot load NCCL (libnccl.so.2) for rankrun::NcclCommunicator; looked, in order:\n"
        "    RANKRUN_NCCL_LIBRARY=/nope/libnccl.so.2: no such file\n"
        "  fix: pip install nvidia-nccl-cu12 (CUDA 13: nvidia-nccl-cu13) in this venv, or set LD_LIBRARY_PATH to "
        "the folder of libnccl.so.2, or RANKRUN_NCCL_LIBRARY=/path/to/libnccl.so.2");
}

TEST_CASE("a library without a function the communicator calls: the file, the functions, the version needed") {
  CHECK(missing_symbols_message(nccl_spec(), "/v/nvidia/nccl/lib/libnccl.so.2", "VIRTUAL_ENV",
                                {"ncclCommInitRankConfig", "ncclCommFinalize"})
            .rfind("NCCL at /v/nvidia/nccl/lib/libnccl.so.2 (VIRTUAL_ENV) has no ncclCommInitRankConfig and "
                   "ncclCommFinalize, which rankrun::NcclCommunicator calls: it needs NCCL 2.14 or newer (pip install",
                   0) == 0);
  CHECK(missing_symbols_message(cudart_spec(), "/x/libcudart.so", "RANKRUN_CUDART_LIBRARY", {"cudaSetDevice"})
            .rfind("the CUDA runtime at /x/libcudart.so (RANKRUN_CUDART_LIBRARY) has no cudaSetDevice, which", 0) == 0);
}

TEST_CASE("NCCL's version code in words, both encodings") {
  CHECK(nccl_version_text(22809) == "2.28.9");
  CHECK(nccl_version_text(21212) == "2.12.12");
  CHECK(nccl_version_text(2803) == "2.8.3");
  CHECK(nccl_version_text(0) == "unknown");
}

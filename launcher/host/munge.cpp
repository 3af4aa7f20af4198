#include "launcher/host/munge.hpp"

#include <dlfcn.h>
#include <munge.h>

#include <cstdlib>
#include <cstring>

namespace rankrun::launcher {

struct Munge::Api {
  void* library = nullptr;
  decltype(&munge_ctx_create) ctx_create = nullptr;
  decltype(&munge_ctx_destroy) ctx_destroy = nullptr;
  decltype(&munge_ctx_set) ctx_set = nullptr;
  decltype(&munge_ctx_strerror) ctx_strerror = nullptr;
  decltype(&munge_encode) encode = nullptr;
  decltype(&munge_decode) decode = nullptr;
  decltype(&munge_strerror) strerror = nullptr;

  ~Api() {
    if (library) ::dlclose(library);
  }
};

namespace {

template <typename F>
void bind(void* library, const char* name, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(library, name));
  if (!fn) throw MungeError(std::string("libmunge.so.2 has no ") + name);
}

// One context per call: contexts are not shared between threads.
class Context {
 public:
  Context(const Munge::Api& api, const std::string& socket) : m_api(api), m_ctx(api.ctx_create()) {
    if (!m_ctx) throw MungeError("munge_ctx_create failed (out of memory)");
    if (!socket.empty()) {
      const munge_err_t e = m_api.ctx_set(m_ctx, MUNGE_OPT_SOCKET, socket.c_str());
      if (e != EMUNGE_SUCCESS) throw MungeError("cannot use the MUNGE socket " + socket + ": " + error(e));
    }
  }
  ~Context() { m_api.ctx_destroy(m_ctx); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  munge_ctx_t get() const { return m_ctx; }
  std::string error(munge_err_t e) const {
    const char* text = m_api.ctx_strerror(m_ctx);
    return text ? text : m_api.strerror(e);
  }

 private:
  const Munge::Api& m_api;
  munge_ctx_t m_ctx;
};

}  // namespace

Munge::Munge(std::string socket) : m_api(std::make_unique<Api>()), m_socket(std::move(socket)) {
  m_api->library = ::dlopen("libmunge.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!m_api->library) {
    const char* why = ::dlerror();
    throw MungeError(std::string("cannot load libmunge.so.2 (the munge or libmunge2 package): ") + (why ? why : "?"));
  }
  bind(m_api->library, "munge_ctx_create", m_api->ctx_create);
  bind(m_api->library, "munge_ctx_destroy", m_api->ctx_destroy);
  bind(m_api->library, "munge_ctx_set", m_api->ctx_set);
  bind(m_api->library, "munge_ctx_strerror", m_api->ctx_strerror);
  bind(m_api->library, "munge_encode", m_api->encode);
  bind(m_api->library, "munge_decode", m_api->decode);
  bind(m_api->library, "munge_strerror", m_api->strerror);
}

Munge::~Munge() = default;

std::string Munge::encode(std::string_view payload, uid_t uid) const {
  Context ctx(*m_api, m_socket);
  munge_err_t e = m_api->ctx_set(ctx.get(), MUNGE_OPT_UID_RESTRICTION, uid);
  if (e != EMUNGE_SUCCESS)
    throw MungeError("cannot restrict a MUNGE credential to uid " + std::to_string(uid) + ": " + ctx.error(e));
  char* credential = nullptr;
  e = m_api->encode(&credential, ctx.get(), payload.data(), static_cast<int>(payload.size()));
  if (e != EMUNGE_SUCCESS) {
    std::free(credential);
    throw MungeError(ctx.error(e));
  }
  std::string out(credential);
  std::free(credential);
  return out;
}

Munge::Decoded Munge::decode(const std::string& credential) const {
  Context ctx(*m_api, m_socket);
  void* payload = nullptr;
  int length = 0;
  Decoded out;
  const munge_err_t e = m_api->decode(credential.c_str(), ctx.get(), &payload, &length, &out.uid, &out.gid);
  if (payload) {
    if (e == EMUNGE_SUCCESS) out.payload.assign(static_cast<const char*>(payload), static_cast<std::size_t>(length));
    std::memset(payload, 0, static_cast<std::size_t>(length > 0 ? length : 0));
    std::free(payload);
  }
  if (e != EMUNGE_SUCCESS) throw MungeError(ctx.error(e));
  return out;
}

}  // namespace rankrun::launcher

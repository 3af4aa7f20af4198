#include "rankrun/worker_session.hpp"

#include "rankrun/failure_record.hpp"

namespace rankrun {
namespace {

// Before the store connection is made, so that a failure to connect is recorded too.
const WorkerContext& with_failure_handler(const WorkerContext& context, const SessionOptions& options) {
  if (options.failure_handler) install_failure_handler();
  return context;
}

}  // namespace

WorkerSession::WorkerSession(SessionOptions options) : WorkerSession(load_worker_context(), std::move(options)) {}

WorkerSession::WorkerSession(const WorkerContext& context, SessionOptions options)
    : m_context(with_failure_handler(context, options)), m_collectives(context, options.collectives) {
  if (options.heartbeat && context.has_store())
    m_heartbeat = std::make_unique<Heartbeat>(context, options.heartbeat_options);
}

WorkerSession::~WorkerSession() = default;

void WorkerSession::step(std::int64_t n) {
  if (m_heartbeat) m_heartbeat->step(n);
}

}  // namespace rankrun

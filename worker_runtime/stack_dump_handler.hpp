#pragma once
// Answers rankrun's request for this process's stack when the job looks hung: on the signal
// named by RANKRUN_STACK_SIGNAL, the thread that receives it (the main thread: the runtime's
// own threads block the signal) writes its native backtrace to RANKRUN_STACK_DIR/<pid>.stack:
// raw frames from the handler at once, replaced within milliseconds by the same frames with
// functions, files and lines, resolved by a symbolizer thread outside the handler (see
// stack_dump_handler.cpp). The file is created at installation; its existence tells rankrun
// it may send the signal.

namespace rankrun::worker {

/// Installs the handler when both variables are set; does nothing otherwise. Idempotent.
void install_stack_dump_handler() noexcept;

/// Blocks the stack-dump signal in the calling thread, so that it reaches the main thread.
void block_stack_dump_signal() noexcept;

}  // namespace rankrun::worker

#include "launcher/launch.hpp"
#include "launcher/processes/user_signals.hpp"

int main(int argc, char** argv) {
  rankrun::launcher::block_continue_signal();
  return rankrun::launcher::run_cli(argc, argv);
}

#include "launcher/launch.hpp"

int main(int argc, char** argv) { return rankrun::launcher::run_cli(argc, argv); }

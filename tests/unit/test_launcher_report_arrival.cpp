#include <doctest/doctest.h>

#include "launcher/report/arrival.hpp"

using namespace rankrun::launcher;

TEST_CASE("arrivals: each group of ranks named once, in the order of how far they got") {
  CHECK(describe_arrivals({Arrival::Rendezvoused, Arrival::Rendezvoused, Arrival::Rendezvoused,
                           Arrival::NeverConnected}) == "ranks 0-2 reached init_process_group; rank 3 never connected");
  CHECK(describe_arrivals({Arrival::Connected, Arrival::Rendezvoused}) ==
        "rank 1 reached init_process_group; rank 0 connected to the store (no init_process_group rendezvous)");
  CHECK(describe_arrivals({Arrival::Rendezvoused, Arrival::Rendezvoused}) == "all ranks reached init_process_group");
}

TEST_CASE("arrivals: a job that never used the store says nothing") {
  CHECK(describe_arrivals({Arrival::NeverConnected, Arrival::NeverConnected}).empty());
}

TEST_CASE("arrivals: a rank whose connection closed before it was matched is not called never connected") {
  // Rank 0 connected, reached init_process_group and exited between two of the watch's looks.
  UnmatchedConnections closed;
  closed.rendezvoused = 1;
  CHECK(describe_arrivals({Arrival::NeverConnected, Arrival::Rendezvoused}, std::nullopt, closed) ==
        "rank 1 reached init_process_group; rank 0 not matched to a connection; 1 connection that reached "
        "init_process_group closed before it was matched to its rank");
  // Both ranks' connections gone before they were matched: the line still says what the store saw.
  closed.rendezvoused = 1;
  closed.connected = 1;
  CHECK(describe_arrivals({Arrival::NeverConnected, Arrival::NeverConnected}, std::nullopt, closed) ==
        "no rank matched to a connection; 2 connections (1 that reached init_process_group) closed before "
        "they were matched to their ranks");
  // Every rank matched: a closed extra connection (torch 1.13's second one) is not worth a word.
  CHECK(describe_arrivals({Arrival::Rendezvoused, Arrival::Rendezvoused}, std::nullopt, closed) ==
        "all ranks reached init_process_group");
}

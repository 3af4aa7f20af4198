#include <doctest/doctest.h>

#include "launcher/report/arrival.hpp"
#include "launcher/report/rank_claims.hpp"

using namespace rankrun::launcher;

namespace {
// The keys torch's gloo sets for rank R, as rankrun's store saw them.
std::string gloo_1_13(int r, bool hostname_key) {
  return "//worker/attempt_0/default_pg/0/0/" + std::string(hostname_key ? "rank_" : "") + std::to_string(r);
}
std::string gloo_2_x(int r) { return "/default_pg/0//cpu//0/" + std::to_string(r); }
}  // namespace

TEST_CASE("rank claims: the keys that register a rank, and those that do not") {
  auto r = rank_registration(gloo_1_13(3, true));
  REQUIRE(r);
  CHECK(r->rank == 3);
  CHECK(r->group == "0");
  CHECK(r->scope == "//worker/attempt_0/default_pg/0/0/");
  CHECK(rank_registration(gloo_1_13(3, false))->scope == r->scope);  // rank_3 and 3: one registration
  r = rank_registration(gloo_2_x(12));
  REQUIRE(r);
  CHECK(r->rank == 12);
  CHECK(r->group == "0");
  CHECK(r->scope == "/default_pg/0//cpu//0/");
  // NCCL's unique id, SET by rank 0 (torch 1.13 and 2.x layouts)
  CHECK(rank_registration("//worker/attempt_0/default_pg/0/0")->rank == 0);
  CHECK(rank_registration("/default_pg/0//cuda//0")->rank == 0);
  // another process group registers its own ranks
  CHECK(rank_registration("/default_pg/1//cpu//0/1")->group == "1");

  CHECK_FALSE(rank_registration("init/"));
  CHECK_FALSE(rank_registration("/default_pg/0"));                          // no segment after the group
  CHECK_FALSE(rank_registration("/default_pg/0/"));                         // an empty one
  CHECK_FALSE(rank_registration("/default_pg//0"));                         // no group name
  CHECK_FALSE(rank_registration("/default_pg/store_based_barrier_key:1"));  // the barrier (an ADD anyway)
  CHECK_FALSE(rank_registration("/default_pg/0/0/1:2"));                    // NCCL's point-to-point ids
  CHECK_FALSE(rank_registration("/default_pg/0/0/-1"));
  CHECK_FALSE(rank_registration("/default_pg/0/0/rank_"));
  CHECK_FALSE(rank_registration("/default_pg/0/0/99999999999"));
  CHECK_FALSE(rank_registration("/rankrun/heartbeat/0"));  // no default_pg
}

TEST_CASE("rank claims: every worker registering its own rank is no finding") {
  RankClaims claims({0, 1, 2});
  for (int local = 0; local < 3; ++local) {
    CHECK_FALSE(claims.on_set(local, gloo_1_13(local, true)));
    CHECK_FALSE(claims.on_set(local, gloo_1_13(local, false)));
    CHECK_FALSE(claims.on_set(local, gloo_1_13(local, false)));  // a worker setting its key again
  }
  CHECK_FALSE(claims.duplicate());
  CHECK(describe_arrivals({Arrival::Rendezvoused, Arrival::Rendezvoused, Arrival::Rendezvoused}, claims.duplicate()) ==
        "all ranks reached init_process_group");
}

TEST_CASE("rank claims: two workers registering rank 0 (a script that reads --local_rank from argv)") {
  RankClaims claims({0, 1});
  CHECK_FALSE(claims.on_set(0, gloo_1_13(0, true)));
  CHECK_FALSE(claims.on_set(0, gloo_1_13(0, false)));
  const auto d = claims.on_set(1, gloo_1_13(0, true));
  REQUIRE(d);
  CHECK(d->rank == 0);
  CHECK(d->first == 0);
  CHECK(d->second == 1);
  CHECK(d->default_group());
  CHECK(d->unregistered == std::vector<int>{1});
  // found once: the same worker's next key, and any later duplicate, say nothing more
  CHECK_FALSE(claims.on_set(1, gloo_1_13(0, false)));
  REQUIRE(claims.duplicate());
  CHECK(claims.duplicate()->second == 1);

  const auto text = describe_duplicate(*d, 4100, 4101);
  CHECK(text.find("rank 0 was registered by two processes: pid 4100 (local rank 0) and pid 4101 (local rank 1); "
                  "no process registered rank 1. ") == 0);
  CHECK(text.find("--local_rank on its command line") != std::string::npos);
  CHECK(text.find("LOCAL_RANK") != std::string::npos);
  CHECK(text.find("'--local_rank=${local_rank}'") != std::string::npos);

  // the report's store line no longer says "all ranks"
  const auto line = describe_arrivals({Arrival::Rendezvoused, Arrival::Rendezvoused}, claims.duplicate());
  CHECK(line ==
        "ranks 0,1 reached init_process_group; two workers registered as rank 0 (local ranks 0 and 1) and none as "
        "rank 1");
}

TEST_CASE("rank claims: a node's global ranks, and a rank that another worker did register") {
  // node 1 of a job: local ranks 0-2 are ranks 4-6; 4 and 5 register 4, 6 registered itself
  RankClaims claims({4, 5, 6});
  CHECK_FALSE(claims.on_set(2, gloo_2_x(6)));
  CHECK_FALSE(claims.on_set(0, gloo_2_x(4)));
  auto d = claims.on_set(1, gloo_2_x(4));
  REQUIRE(d);
  CHECK(d->rank == 4);
  CHECK(d->unregistered == std::vector<int>{5});
  // local ranks 0 and 1 both registered 6's rank, which 2 has: nothing is unregistered
  RankClaims other({4, 5, 6});
  other.on_set(2, gloo_2_x(6));
  other.on_set(0, gloo_2_x(5));
  other.on_set(1, gloo_2_x(4));
  d = other.on_set(0, gloo_2_x(6));
  REQUIRE(d);
  CHECK(d->first == 2);
  CHECK(d->second == 0);
  CHECK(d->unregistered.empty());
  CHECK(
      describe_duplicate(*d, 7, 8).find("rank 6 was registered by two processes: pid 7 (local rank 2) and pid 8 (local "
                                        "rank 0). Does") == 0);
}

TEST_CASE("rank claims: the same rank in different process groups or attempts is no duplicate") {
  RankClaims claims({0, 1});
  CHECK_FALSE(claims.on_set(0, "/default_pg/0//cpu//0/0"));
  CHECK_FALSE(claims.on_set(1, "/default_pg/0//cpu//0/1"));
  CHECK_FALSE(claims.on_set(1, "/default_pg/1//cpu//0/0"));  // rank 0 of a subgroup
  CHECK_FALSE(claims.on_set(0, "/default_pg/2//cpu//0/0"));
  CHECK_FALSE(claims.on_set(1, "//worker/attempt_1/default_pg/0/0/0"));
  // a subgroup's duplicate names the group and no unregistered global rank
  const auto d = claims.on_set(0, "/default_pg/1//cpu//0/0");
  REQUIRE(d);
  CHECK_FALSE(d->default_group());
  CHECK(d->unregistered.empty());
  CHECK(describe_duplicate(*d, 1, 2).find(
            "rank 0 of process group '1' was registered by two processes: pid 1 (local rank 1) "
            "and pid 2 (local rank 0). ") == 0);
}

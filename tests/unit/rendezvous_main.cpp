// The one translation unit of rankrun_store_tests that provides doctest's main(), and the skips
// of skip.hpp: a listener knows the running case, skip_case() prints and records it with its
// reason, and main() counts the skipped cases after the run and exits with k_skip_exit_code when
// any case was skipped and none failed (a failure still exits 1).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "tests/unit/skip.hpp"

namespace {

std::string g_current_case;
std::vector<std::string> g_skipped;  // the names of the skipped cases
unsigned g_selected_cases = 0;

class SkipListener : public doctest::IReporter {
 public:
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    g_selected_cases = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData& data) override { g_current_case = data.m_name; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("skips", 1, SkipListener);

}  // namespace

void rankrun::test::skip_case(const std::string& reason) {
  std::cout << "skipped: " << g_current_case << ": " << reason << std::endl;
  // A case entered again for its next subcase counts once.
  if (std::find(g_skipped.begin(), g_skipped.end(), g_current_case) == g_skipped.end()) {
    g_skipped.push_back(g_current_case);
  }
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || result != 0 || g_skipped.empty()) return result;
  std::cout << "[doctest] skipped: " << g_skipped.size() << " of the " << g_selected_cases
            << " test cases could not run here (the \"skipped:\" lines above): exit code "
            << rankrun::test::k_skip_exit_code << std::endl;
  return rankrun::test::k_skip_exit_code;
}

// Writes the report tests' synthetic study (tests/support/report_study.h)
// into a SQLite store, fast (one transaction), for tests that need a large
// study in a file: report_browser_test.py opens the report of 20,000
// trials to check the downsampled page.
//
// Usage: make_report_study DB NAME N_TRIALS
#include <cstdlib>
#include <iostream>
#include <string>

#include "search/sqlite_storage.h"
#include "tests/support/report_study.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: make_report_study DB NAME N_TRIALS\n";
    return 2;
  }
  try {
    const int n = std::stoi(argv[3]);
    if (n < 1) throw std::invalid_argument("N_TRIALS must be >= 1");
    hps::SqliteOptions so;
    so.synchronous = "OFF";  // a scratch file for a test
    hps::SqliteStorage storage(argv[1], so);
    hps::testsupport::make_report_study(storage, argv[2], n);
  } catch (const std::exception& e) {
    std::cerr << "make_report_study: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// RunThreads: runs body(0), ..., body(n - 1), each on its own thread, all at once; returns once
// every one has returned.
#pragma once

#include <thread>
#include <vector>

namespace strata::testing {

template <typename Body>
void RunThreads(int n, const Body& body) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int t = 0; t < n; ++t) threads.emplace_back([&body, t] { body(t); });
  for (std::thread& thread : threads) thread.join();
}

}  // namespace strata::testing

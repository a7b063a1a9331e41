// The Store contract, run against every store: memory, file, TCP, and a prefix view over
// each.
// What only one store does (file names, lock files) is tested beside it.
#include "rendezvous/store.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <regex>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "rendezvous/file_store.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "rendezvous/testing/temp_dir.h"

namespace kolo::rendezvous {
namespace {

using std::chrono::milliseconds;

struct Kind {
  std::string name;
  std::string store_text;  // how the store below names itself in messages
  bool across_processes;   // a store reopened in a forked child sees the same keys
  // Opens the store under test in `dir` (a fresh directory per test); for the kinds that
  // work across processes, every call for one `dir` opens the same store.
  std::function<std::shared_ptr<Store>(const std::string& dir)> open;
};

std::shared_ptr<Store> open_file(const std::string& dir) {
  std::shared_ptr<FileStore> store;
  const Status s = FileStore::open(dir + "/store", FileStoreOptions{}, &store);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return store;
}

// One TCP server per test directory, started by the first open; every open (in a forked
// child too, which finds the parent's server in its copy of the table) is a new client.
// The server lives as long as a client the parent opened.
std::shared_ptr<Store> open_tcp(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<TcpStoreServer>> servers;
  const std::string secret = "secret of " + dir;
  std::shared_ptr<TcpStoreServer> server;
  {
    std::lock_guard<std::mutex> lock(mu);
    server = servers[dir].lock();
    if (!server) {
      TcpStoreServerOptions options;
      options.secret = secret;
      std::unique_ptr<TcpStoreServer> started;
      const Status s = TcpStoreServer::start(options, &started);
      EXPECT_TRUE(s.ok()) << s.to_string();
      server = std::move(started);
      servers[dir] = server;
    }
  }
  TcpStoreOptions options;
  options.port = server->port();
  options.secret = secret;
  std::unique_ptr<TcpStore> client;
  const Status s = TcpStore::connect(options, &client);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return std::shared_ptr<Store>(client.release(), [server](Store* store) { delete store; });
}

std::vector<Kind> kinds() {
  auto memory = [](const std::string&) {
    return std::shared_ptr<Store>(std::make_shared<MemoryStore>());
  };
  return {
      {"memory", "memory store", false, memory},
      {"file", "file store", true, open_file},
      {"tcp", "TCP store", true, open_tcp},
      {"prefix_memory", "memory store", false,
       [memory](const std::string& dir) {
         return std::shared_ptr<Store>(std::make_shared<PrefixStore>(memory(dir), "job"));
       }},
      {"prefix_file", "file store", true,
       [](const std::string& dir) {
         return std::shared_ptr<Store>(std::make_shared<PrefixStore>(open_file(dir), "job"));
       }},
      {"prefix_tcp", "TCP store", true,
       [](const std::string& dir) {
         return std::shared_ptr<Store>(std::make_shared<PrefixStore>(open_tcp(dir), "job"));
       }},
  };
}

// gtest names a parameter by this, not by its bytes.
void PrintTo(const Kind& kind, std::ostream* os) { *os << kind.name; }

double seconds_since(Deadline start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override { store_ = GetParam().open(dir_.path()); }
  std::string must_get(const std::string& key) {
    std::string value;
    const Status s = store_->get(key, deadline_after(5), &value);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return value;
  }

  testing::TempDirectory dir_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGetAnyBytes) {
  const std::string binary("a\0b\xff\n", 5);
  ASSERT_TRUE(store_->set("k", binary).ok());
  EXPECT_EQ(must_get("k"), binary);
  ASSERT_TRUE(store_->set("k", "").ok());  // replaced; empty values exist
  EXPECT_EQ(must_get("k"), "");
  ASSERT_TRUE(store_->set("rank/3/addr", "10.0.0.3:4000").ok());
  EXPECT_EQ(must_get("rank/3/addr"), "10.0.0.3:4000");
}

TEST_P(StoreTest, TryGetAndCheckDoNotWait) {
  std::string value = "untouched";
  bool found = true;
  ASSERT_TRUE(store_->try_get("k", &value, &found).ok());
  EXPECT_FALSE(found);
  EXPECT_EQ(value, "untouched");
  bool all = true;
  ASSERT_TRUE(store_->check({"k", "j"}, &all).ok());
  EXPECT_FALSE(all);
  ASSERT_TRUE(store_->set("k", "v").ok());
  ASSERT_TRUE(store_->try_get("k", &value, &found).ok());
  EXPECT_TRUE(found);
  EXPECT_EQ(value, "v");
  ASSERT_TRUE(store_->check({"k", "j"}, &all).ok());
  EXPECT_FALSE(all);
  ASSERT_TRUE(store_->set("j", "w").ok());
  ASSERT_TRUE(store_->check({"k", "j"}, &all).ok());
  EXPECT_TRUE(all);
}

TEST_P(StoreTest, BlockingGetWakesWhenAnotherThreadSets) {
  const Deadline start = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_TRUE(store_->set("late", "here").ok());
  });
  std::string value;
  const Status s = store_->get("late", deadline_after(5), &value);
  setter.join();
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(value, "here");
  const double took = seconds_since(start);
  EXPECT_GE(took, 0.09);  // it really waited for the set
  EXPECT_LT(took, 1.0);   // and woke soon after it
}

// Deadline::max() (no limit) must neither overflow into "already passed" nor miss the set.
TEST_P(StoreTest, TheLatestDeadlineStillWakes) {
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(store_->set("k", "v").ok());
  });
  std::string value;
  const Status s = store_->get("k", Deadline::max(), &value);
  setter.join();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(value, "v");
}

// add and compare_set wake waiters as set does.
TEST_P(StoreTest, EveryWriteWakesWaiters) {
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    std::int64_t n = 0;
    EXPECT_TRUE(store_->add("n", 1, &n).ok());
    std::this_thread::sleep_for(milliseconds(400));
    std::string actual;
    EXPECT_TRUE(store_->compare_set("c", "", "x", &actual).ok());
  });
  const Deadline start = Clock::now();
  EXPECT_EQ(must_get("n"), "1");
  EXPECT_LT(seconds_since(start), 0.3);  // woken by the add, not by the write after it
  EXPECT_TRUE(store_->wait({"c"}, deadline_after(5)).ok());
  writer.join();
  EXPECT_LT(seconds_since(start), 1.0);
}

TEST_P(StoreTest, GetPastTheDeadlineNamesTheKeyAndTheStore) {
  const Deadline start = Clock::now();
  std::string value;
  const Status s = store_->get("rank/3", start + milliseconds(200), &value);
  const double took = seconds_since(start);
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  // The store counts from when its wait began, a little after this test's start when the
  // call is slow to begin (seen under TSan: "within 0.199 s").
  EXPECT_TRUE(std::regex_search(
      s.message(), std::regex("rank/3' was not set within (0\\.2|0\\.1[5-9][0-9]*) s in ")))
      << s.message();
  EXPECT_NE(s.message().find(" s in " + GetParam().store_text), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("is every process of the job running"), std::string::npos);
  EXPECT_GE(took, 0.2);
  EXPECT_LT(took, 0.7);
}

TEST_P(StoreTest, ADeadlineAlreadyPassedStillLooksOnce) {
  ASSERT_TRUE(store_->set("k", "v").ok());
  std::string value;
  EXPECT_TRUE(store_->get("k", Clock::now() - std::chrono::seconds(1), &value).ok());
  EXPECT_EQ(value, "v");
  EXPECT_TRUE(store_->wait({"k"}, Clock::now() - std::chrono::seconds(1)).ok());
  const Status s = store_->wait({"k", "absent"}, Clock::now() - std::chrono::seconds(1));
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("within 0 s"), std::string::npos) << s.message();
}

TEST_P(StoreTest, AddCountsFromZeroAndStoresDecimalText) {
  std::int64_t v = 0;
  ASSERT_TRUE(store_->add("n", 5, &v).ok());
  EXPECT_EQ(v, 5);
  EXPECT_EQ(must_get("n"), "5");
  ASSERT_TRUE(store_->add("n", -7, &v).ok());
  EXPECT_EQ(v, -2);
  EXPECT_EQ(must_get("n"), "-2");
  ASSERT_TRUE(store_->set("m", "41").ok());  // a counter set by hand
  ASSERT_TRUE(store_->add("m", 1, &v).ok());
  EXPECT_EQ(v, 42);
}

TEST_P(StoreTest, AddRefusesWhatIsNotACounterAndChangesNothing) {
  ASSERT_TRUE(store_->set("name", "abc").ok());
  std::int64_t v = 7;
  Status s = store_->add("name", 1, &v);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("name' in"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("holds 'abc', not a decimal integer"), std::string::npos);
  EXPECT_EQ(must_get("name"), "abc");
  for (const char* bad : {"", " 1", "+1", "1x", "-"}) {
    ASSERT_TRUE(store_->set("bad", bad).ok());
    EXPECT_EQ(store_->add("bad", 1, &v).code(), ErrorCode::kInvalidArgument) << bad;
  }
  ASSERT_TRUE(store_->set("big", std::to_string(INT64_MAX)).ok());
  s = store_->add("big", 1, &v);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("overflows"), std::string::npos) << s.message();
  EXPECT_EQ(must_get("big"), std::to_string(INT64_MAX));
}

// Every add returns a different value: no two threads read the same old count.
TEST_P(StoreTest, AddIsAtomicUnderThreads) {
  constexpr int kThreads = 4, kAdds = 100;
  std::vector<std::vector<std::int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        std::int64_t v = 0;
        const Status s = store_->add("count", 1, &v);
        EXPECT_TRUE(s.ok()) << s.to_string();
        seen[t].push_back(v);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), std::size_t{kThreads * kAdds});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(must_get("count"), std::to_string(kThreads * kAdds));
}

// As above with real processes, each opening the store itself; each records the values
// it got as keys, so the parent sees that none was handed out twice.
TEST_P(StoreTest, AddIsAtomicUnderProcesses) {
  if (!GetParam().across_processes) GTEST_SKIP() << "one process only";
  constexpr int kProcesses = 4, kAdds = 50;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::shared_ptr<Store> store = GetParam().open(dir_.path());
      int failures = 0;
      for (int i = 0; i < kAdds; ++i) {
        std::int64_t v = 0;
        std::string actual;
        if (!store->add("count", 1, &v).ok()) ++failures;
        const std::string mark = "got/" + std::to_string(v);
        // compare_set, so a value handed out twice is seen by the second taker.
        const std::string tag = std::to_string(p) + "." + std::to_string(i);
        if (!store->compare_set(mark, "", tag, &actual).ok()) ++failures;
        if (actual != tag) ++failures;
      }
      ::_exit(failures == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  const Deadline deadline = deadline_after(20);
  for (const pid_t pid : children) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid << " " << status;
  }
  EXPECT_EQ(must_get("count"), std::to_string(kProcesses * kAdds));
  std::vector<std::string> marks;
  for (int v = 1; v <= kProcesses * kAdds; ++v) marks.push_back("got/" + std::to_string(v));
  EXPECT_TRUE(store_->wait(marks, Clock::now()).ok());
}

TEST_P(StoreTest, CompareSetFollowsTorchsRules) {
  std::string actual = "x";
  // Missing key, expected empty: set.
  ASSERT_TRUE(store_->compare_set("k", "", "one", &actual).ok());
  EXPECT_EQ(actual, "one");
  EXPECT_EQ(must_get("k"), "one");
  // Present, expected matches: swapped.
  ASSERT_TRUE(store_->compare_set("k", "one", "two", &actual).ok());
  EXPECT_EQ(actual, "two");
  // Present, expected differs: unchanged, the current value comes back.
  ASSERT_TRUE(store_->compare_set("k", "one", "three", &actual).ok());
  EXPECT_EQ(actual, "two");
  EXPECT_EQ(must_get("k"), "two");
  // Present, expected empty: a present key does not count as empty.
  ASSERT_TRUE(store_->compare_set("k", "", "four", &actual).ok());
  EXPECT_EQ(actual, "two");
  // Missing, expected not empty: nothing is created.
  ASSERT_TRUE(store_->compare_set("m", "old", "new", &actual).ok());
  EXPECT_EQ(actual, "");
  bool found = true;
  std::string value;
  ASSERT_TRUE(store_->try_get("m", &value, &found).ok());
  EXPECT_FALSE(found);
  // Present with the empty value: expected "" matches it.
  ASSERT_TRUE(store_->set("e", "").ok());
  ASSERT_TRUE(store_->compare_set("e", "", "filled", &actual).ok());
  EXPECT_EQ(actual, "filled");
}

TEST_P(StoreTest, CompareSetElectsExactlyOneThread) {
  constexpr int kThreads = 6;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string actual;
      const std::string me = "thread " + std::to_string(t);
      EXPECT_TRUE(store_->compare_set("leader", "", me, &actual).ok());
      if (actual == me) ++winners;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST_P(StoreTest, WaitReturnsWhenEveryKeyIsSet) {
  std::thread setter([&] {
    for (const char* key : {"a", "b", "c"}) {
      std::this_thread::sleep_for(milliseconds(30));
      EXPECT_TRUE(store_->set(key, "1").ok());
    }
  });
  const Deadline start = Clock::now();
  const Status s = store_->wait({"a", "b", "c"}, deadline_after(5));
  setter.join();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_GE(seconds_since(start), 0.08);
  bool all = false;
  ASSERT_TRUE(store_->check({"a", "b", "c"}, &all).ok());
  EXPECT_TRUE(all);
}

TEST_P(StoreTest, WaitPastTheDeadlineNamesOnlyTheMissingKeys) {
  ASSERT_TRUE(store_->set("rank/0", "x").ok());
  const Deadline start = Clock::now();
  const Status s = store_->wait({"rank/0", "rank/1", "rank/2"}, start + milliseconds(150));
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("rank/1', '"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank/2' (2 of the 3 keys waited for) were not set within 0.15 s"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("rank/0"), std::string::npos) << s.message();
  EXPECT_LT(seconds_since(start), 0.65);
}

TEST_P(StoreTest, EraseSaysWhetherTheKeyExisted) {
  bool existed = true;
  ASSERT_TRUE(store_->erase("k", &existed).ok());
  EXPECT_FALSE(existed);
  ASSERT_TRUE(store_->set("k", "v").ok());
  ASSERT_TRUE(store_->erase("k", &existed).ok());
  EXPECT_TRUE(existed);
  std::string value;
  bool found = true;
  ASSERT_TRUE(store_->try_get("k", &value, &found).ok());
  EXPECT_FALSE(found);
  EXPECT_EQ(store_->get("k", deadline_after(0.05), &value).code(), ErrorCode::kPeerFailure);
  std::int64_t v = 0;
  ASSERT_TRUE(store_->add("k", 3, &v).ok());  // a new counter, from zero
  EXPECT_EQ(v, 3);
}

TEST_P(StoreTest, PrefixesDoNotSeeEachOthersKeys) {
  PrefixStore a(store_, "a"), b(store_, "b");
  ASSERT_TRUE(a.set("x", "in a").ok());
  std::string value;
  bool found = true;
  ASSERT_TRUE(b.try_get("x", &value, &found).ok());
  EXPECT_FALSE(found);
  ASSERT_TRUE(store_->try_get("x", &value, &found).ok());
  EXPECT_FALSE(found);
  ASSERT_TRUE(b.set("x", "in b").ok());
  ASSERT_TRUE(a.get("x", deadline_after(1), &value).ok());
  EXPECT_EQ(value, "in a");
  std::int64_t n = 0;
  ASSERT_TRUE(a.add("n", 2, &n).ok());
  ASSERT_TRUE(b.add("n", 5, &n).ok());
  EXPECT_EQ(n, 5);
  bool existed = false;
  ASSERT_TRUE(a.erase("x", &existed).ok());
  EXPECT_TRUE(existed);
  ASSERT_TRUE(b.get("x", deadline_after(1), &value).ok());
  EXPECT_EQ(value, "in b");
  EXPECT_EQ(b.wait({"n", "x"}, deadline_after(1)).code(), ErrorCode::kOk);
  EXPECT_EQ(a.wait({"n", "x"}, deadline_after(0.05)).code(), ErrorCode::kPeerFailure);
}

TEST_P(StoreTest, TheEmptyKeyIsRefused) {
  std::string value;
  bool flag = false;
  std::int64_t n = 0;
  EXPECT_EQ(store_->set("", "v").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->get("", deadline_after(1), &value).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->try_get("", &value, &flag).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->check({"a", ""}, &flag).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->add("", 1, &n).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->compare_set("", "", "v", &value).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(store_->wait({""}, deadline_after(1)).code(), ErrorCode::kInvalidArgument);
  const Status s = store_->erase("", &flag);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("the empty key is not allowed"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::ValuesIn(kinds()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kolo::rendezvous

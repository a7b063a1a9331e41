// What only the file store does: file names, opening, the lock file, whole values.
// (The Store contract itself runs in store_test.cc.)
#include "rendezvous/file_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "rendezvous/testing/temp_dir.h"

namespace kolo::rendezvous {
namespace {

std::string name_of(const std::string& key) {
  std::string name;
  const Status s = FileStore::file_name_of(key, &name);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return name;
}

std::shared_ptr<FileStore> open_store(const std::string& dir, FileStoreOptions options = {}) {
  std::shared_ptr<FileStore> store;
  const Status s = FileStore::open(dir, options, &store);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return store;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.push_back(e.path().filename());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(FileStoreNames, KeysBecomeSafeFileNames) {
  EXPECT_EQ(name_of("rank_3-addr.v2"), "rank_3-addr.v2");
  EXPECT_EQ(name_of("rank/3"), "rank%2F3");
  EXPECT_EQ(name_of("."), "%2E");
  EXPECT_EQ(name_of(".."), "%2E.");
  EXPECT_EQ(name_of(".lock"), "%2Elock");  // cannot collide with the store's own files
  EXPECT_EQ(name_of("../up"), "%2E.%2Fup");
  EXPECT_EQ(name_of("100%"), "100%25");
  EXPECT_EQ(name_of(std::string("\0\xff ", 3)), "%00%FF%20");
  // One-to-one: the escape character is escaped too.
  EXPECT_NE(name_of("a/b"), name_of("a%2Fb"));
}

TEST(FileStoreNames, TooLongAndEmptyKeysAreRefused) {
  std::string name;
  EXPECT_TRUE(FileStore::file_name_of(std::string(FileStore::kMaxFileName, 'k'), &name).ok());
  // 70 slashes: 210 bytes of name.
  const Status s = FileStore::file_name_of(std::string(70, '/'), &name);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is too long: its file name would have 210 bytes, at most 200"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(FileStore::file_name_of("", &name).code(), ErrorCode::kInvalidArgument);
}

TEST(FileStore, KeysStayInsideTheDirectory) {
  kolo::testing::TempDirectory tmp;
  const auto store = open_store(tmp.path() + "/s");
  ASSERT_TRUE(store->set("../escaped", "x").ok());
  ASSERT_TRUE(store->set("/abs/path", "y").ok());
  EXPECT_EQ(names_in(tmp.path()), std::vector<std::string>{"s"});
  EXPECT_EQ(names_in(tmp.path() + "/s"),
            (std::vector<std::string>{"%2E.%2Fescaped", "%2Fabs%2Fpath", ".lock"}));
}

TEST(FileStore, OpenCreatesTheDirectoryOwnerOnly) {
  kolo::testing::TempDirectory tmp;
  const std::string dir = tmp.path() + "/a/b/c/";
  const auto store = open_store(dir);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->directory(), tmp.path() + "/a/b/c");
  EXPECT_EQ(store->describe(), "file store " + tmp.path() + "/a/b/c");
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_TRUE(store->set("k", "v").ok());
  ASSERT_EQ(::stat((dir + "k").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(FileStore, OpenFailsNamingThePath) {
  kolo::testing::TempDirectory tmp;
  const std::string file = tmp.path() + "/plain";
  std::ofstream(file) << "not a directory";
  std::shared_ptr<FileStore> store;
  Status s = FileStore::open(file + "/store", {}, &store);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find(file), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Not a directory"), std::string::npos) << s.message();
  EXPECT_EQ(store, nullptr);
  s = FileStore::open(file, {}, &store);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("cannot use " + file), std::string::npos) << s.message();
  EXPECT_EQ(FileStore::open("", {}, &store).code(), ErrorCode::kInvalidArgument);
}

TEST(FileStore, TwoOpeningsOfOneDirectoryShareTheKeys) {
  kolo::testing::TempDirectory tmp;
  const auto a = open_store(tmp.path());
  const auto b = open_store(tmp.path());
  ASSERT_TRUE(a->set("k", "from a").ok());
  std::string value;
  ASSERT_TRUE(b->get("k", deadline_after(1), &value).ok());
  EXPECT_EQ(value, "from a");
}

// Readers never see part of a value: every read is one whole value or the other.
TEST(FileStore, ReadersSeeWholeValuesOnly) {
  kolo::testing::TempDirectory tmp;
  const auto store = open_store(tmp.path());
  const std::string as(256 * 1024, 'a'), bs(256 * 1024, 'b');
  ASSERT_TRUE(store->set("v", as).ok());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 40; ++i) EXPECT_TRUE(store->set("v", i % 2 ? as : bs).ok());
    done = true;
  });
  int reads = 0;
  while (!done || reads < 10) {
    std::string value;
    bool found = false;
    ASSERT_TRUE(store->try_get("v", &value, &found).ok());
    ASSERT_TRUE(found);
    ASSERT_TRUE(value == as || value == bs) << "a torn value of " << value.size() << " bytes";
    ++reads;
  }
  writer.join();
}

// A failed write (here: the key's file name is taken by a directory) leaves no value and
// no temporary file behind, and says which path failed.
TEST(FileStore, AFailedWriteLeavesNothingBehind) {
  kolo::testing::TempDirectory tmp;
  const auto store = open_store(tmp.path());
  ASSERT_EQ(::mkdir((tmp.path() + "/k").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((tmp.path() + "/k/x").c_str(), 0700), 0);  // not empty: rename fails
  const Status s = store->set("k", "value");
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("cannot write key 'k': rename to " + tmp.path() + "/k"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(names_in(tmp.path()), (std::vector<std::string>{".lock", "k"}));
}

// Readers take no lock; writers wait for it up to lock_timeout_s, then say who to suspect.
TEST(FileStore, AHeldLockBoundsWritersNotReaders) {
  kolo::testing::TempDirectory tmp;
  FileStoreOptions options;
  options.lock_timeout_s = 0.2;
  const auto store = open_store(tmp.path(), options);
  ASSERT_TRUE(store->set("k", "v").ok());
  const std::string lock_path = tmp.path() + "/.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);  // another "process" holds the lock
  std::string value;
  EXPECT_TRUE(store->get("k", deadline_after(1), &value).ok());
  const Deadline start = Clock::now();
  const Status s = store->set("k", "w");
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(s.code(), ErrorCode::kPeerFailure);
  EXPECT_NE(s.message().find("the lock file " + lock_path + " stayed locked for 0.2 s"),
            std::string::npos)
      << s.message();
  EXPECT_GE(took, 0.2);
  EXPECT_LT(took, 0.7);
  ::close(fd);  // released: writes go through again
  ASSERT_TRUE(store->set("k", "w").ok());
  ASSERT_TRUE(store->get("k", deadline_after(1), &value).ok());
  EXPECT_EQ(value, "w");
}

}  // namespace
}  // namespace kolo::rendezvous

// write_file_durably: the whole file or none of it, and no temporary left behind.
#include "common/durable_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kolo {
namespace {

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/kolo-durable-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/file";
  }
  void TearDown() override {
    ::unlink(durable_temp_path(path_).c_str());
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    return all.str();
  }
  static bool exists(const std::string& path) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
  }
  std::string dir_, path_;
};

TEST_F(DurableFileTest, WritesThePartsInOrderAndLeavesNoTemporary) {
  ASSERT_TRUE(write_file_durably(path_, {"head:", std::string(100000, 'x'), ":tail"}).ok());
  EXPECT_EQ(read(path_), "head:" + std::string(100000, 'x') + ":tail");
  EXPECT_FALSE(exists(durable_temp_path(path_)));
  // A second write replaces the first whole.
  ASSERT_TRUE(write_file_durably(path_, {"second"}).ok());
  EXPECT_EQ(read(path_), "second");
}

// A full disk: the temporary is /dev/full, where every write fails with ENOSPC. The
// previous file stays as it was and the temporary is removed (a failed save once left its
// .tmp behind).
TEST_F(DurableFileTest, AFullDiskLeavesThePreviousFileAndNoTemporary) {
  ASSERT_TRUE(write_file_durably(path_, {"the previous one"}).ok());
  ASSERT_EQ(::symlink("/dev/full", durable_temp_path(path_).c_str()), 0);
  const Status s = write_file_durably(path_, {std::string(1 << 20, 'y')});
  EXPECT_EQ(s.code(), ErrorCode::kInternal) << s.to_string();
  EXPECT_NE(
      s.message().find("writing " + durable_temp_path(path_) + " failed: No space left on device"),
      std::string::npos)
      << s.message();
  EXPECT_EQ(read(path_), "the previous one");
  EXPECT_FALSE(exists(durable_temp_path(path_)));
}

TEST_F(DurableFileTest, ADirectoryOrAMissingDirectoryIsRefusedNamingIt) {
  Status s = write_file_durably(dir_, {"x"});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.message(), dir_ + " is a directory; give a file name");
  const std::string missing = dir_ + "/no/such/file";
  s = write_file_durably(missing, {"x"});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("creating " + missing + ".tmp failed: No such file or directory"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace kolo

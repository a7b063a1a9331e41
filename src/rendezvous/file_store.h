// FileStore: a Store kept in a directory, for the processes of a job on one host or on
// hosts that share a file system (NFS, Lustre, ...), when no TCP store can be reached.
//
// Layout: one file per key, named by file_name_of() (an escaped form of the key; names
// starting with '.' are the store's own). A value is written to a temporary file that is
// then renamed over the key's file, so a reader sees the old value or the new one, never
// part of one. Writes (set, add, compare_set, erase) also hold an exclusive flock() on
// "<directory>/.lock", so read-modify-writes are atomic across processes; readers take no
// lock. flock() is released by the kernel when a process dies, so a crashed writer cannot
// wedge the store; a stopped one is bounded by lock_timeout_s. (Linux's NFS client
// emulates flock() with whole-file byte-range locks, which the server arbitrates, unless
// the mount has local_lock=flock or local_lock=all.)
//
// Blocking get/wait poll the files, with a back-off from 1 ms up to
// max_poll_interval_s, never sleeping past the deadline. On NFS, a client may cache "no
// such file" for a while (mount option lookupcache=positive avoids it).
//
// The directory and its files are created readable by their owner only. The store never
// removes the directory: whoever made it for the job does. Not for: large values (each
// read copies the whole file), many thousands of keys (one file each), or crash
// durability (nothing is fsync'ed: the values do not outlive the job).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace kolo::rendezvous {

struct FileStoreOptions {
  // Longest pause between two looks at the files during a blocking get or wait. The first
  // pause is 1 ms, doubling up to this. Default 0.05 s; raise it on a shared file system
  // whose metadata server many polling ranks would load.
  double max_poll_interval_s = 0.05;
  // How long a write waits for the lock file before failing (a holder stopped, e.g. by
  // SIGSTOP or a hung file server). Default 60 s.
  double lock_timeout_s = 60;
};

class FileStore : public Store {
 public:
  // Opens the store in `directory`, creating it (and missing parents) if needed. Fails
  // naming the path and the reason when it cannot be created or written.
  static Status open(const std::string& directory, const FileStoreOptions& options,
                     std::shared_ptr<FileStore>* out);

  // The name of the file that holds `key`: bytes [A-Za-z0-9_-] and non-leading '.' stand
  // for themselves, every other byte is %XX (so no '/', no "." or "..", no leading '.').
  // kInvalidArgument for the empty key and for keys whose name would be longer than
  // kMaxFileName bytes.
  static Status file_name_of(const std::string& key, std::string* name);
  static constexpr std::size_t kMaxFileName = 200;

  Status set(const std::string& key, const std::string& value) override;
  Status get(const std::string& key, Deadline deadline, std::string* value) override;
  Status try_get(const std::string& key, std::string* value, bool* found) override;
  Status check(const std::vector<std::string>& keys, bool* all_exist) override;
  Status add(const std::string& key, std::int64_t delta, std::int64_t* new_value) override;
  Status compare_set(const std::string& key, const std::string& expected,
                     const std::string& desired, std::string* actual) override;
  Status wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Status erase(const std::string& key, bool* existed) override;
  std::string describe() const override { return "file store " + directory_; }

  const std::string& directory() const { return directory_; }

 private:
  FileStore(std::string directory, const FileStoreOptions& options, std::string token);

  class WriteLock;
  // file_name_of(), with messages that name `store`.
  static Status encode(const std::string& store, const std::string& key, std::string* name);
  Status name_of(const std::string& key, std::string* name) const;
  // Holds the directory's lock file (and mu_) for as long as *lock lives.
  Status lock(std::unique_ptr<WriteLock>* lock);
  // Reads the value of `key` (file `name`); *found = false when there is no such file.
  Status read(const std::string& key, const std::string& name, std::string* value,
              bool* found) const;
  // Writes `value` as the value of `key` (file `name`): temporary file, then rename.
  Status write(const std::string& key, const std::string& name, const std::string& value);
  // The keys of `keys` without a file, in order.
  Status missing(const std::vector<std::string>& keys, std::vector<std::string>* absent) const;
  std::string path_of(const std::string& name) const { return directory_ + "/" + name; }

  const std::string directory_;
  const FileStoreOptions options_;
  // Makes this store's temporary file names unique among all processes and hosts.
  const std::string token_;
  std::atomic<std::uint64_t> temp_count_{0};
  // Serialises this object's writers before they take the lock file: flock() excludes
  // threads that open the file separately on a local file system, but an NFS client may
  // treat all locks of one process as one owner.
  std::mutex mu_;
};

}  // namespace kolo::rendezvous
